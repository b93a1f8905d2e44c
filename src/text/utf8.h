// UTF-8 helpers for the tokenizer: strict decoding to code points, lossy repair of byte
// strings (each maximal invalid subpart becomes U+FFFD, as Unicode recommends and Rust's
// String::from_utf8_lossy does), and the length of an incomplete trailing character.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meganeura::text {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when the bytes there do not
// start one (including a sequence cut off by the end of s).
size_t utf8_sequence_length(std::string_view s, size_t i);

// The code point of the valid sequence of length `len` at s[i].
uint32_t utf8_decode_at(std::string_view s, size_t i, size_t len);

// Appends the UTF-8 encoding of `cp` (a scalar value) to `out`.
void utf8_append(std::string& out, uint32_t cp);

// Byte offset of the first invalid byte in s, or s.size() when s is valid UTF-8.
size_t utf8_first_invalid(std::string_view s);

// `s` with every maximal invalid subpart replaced by U+FFFD.
std::string utf8_lossy(std::string_view s);

// How many bytes at the end of s form the start of a character that more bytes could still
// complete (0 to 3).
size_t utf8_incomplete_tail(std::string_view s);

}  // namespace meganeura::text
