// The character classes the pre-tokenizer patterns use, from ICU's Unicode data, and Unicode
// normalisation forms.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace meganeura::text {

// Bits of a character's class. kLetter: \p{L}; kNumber: \p{N}; kSpace: \s (the White_Space
// property, as in the Rust regex crate); kNewline: \r or \n.
enum CharClass : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4, kNewline = 8 };

// The class bits of a code point (a table for the Basic Multilingual Plane, ICU beyond it).
uint8_t char_class(uint32_t cp);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };

// `s` (valid UTF-8) in the normal form; a string already in it is returned unchanged.
std::string normalize(std::string_view s, NormalForm form);

}  // namespace meganeura::text
