// Fuzzes the tokenizer.json reader, and the encoder and decoder of what it accepts. The input
// is a tokenizer.json, optionally followed by a NUL byte and a text to encode. Properties: a
// rejection is a TokenizerError and nothing else; encoding gives ids the tokenizer can decode;
// streaming decoding joins to the whole decoding; plain ASCII text round-trips (allowing the
// optional prefix space) when the file has no added tokens and no unknown token.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

using namespace meganeura;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t cut = in.find('\0');
  std::string_view file = in.substr(0, cut);
  std::string_view text = cut == std::string_view::npos ? std::string_view() : in.substr(cut + 1);
  std::optional<text::Tokenizer> tok;
  try {
    tok.emplace(text::Tokenizer::from_json(file));
  } catch (const text::TokenizerError&) {
    return 0;
  }
  if (text::utf8_first_invalid(text) != text.size()) {
    try {
      tok->encode(text);
      fuzz::property_failed("invalid UTF-8 was encoded");
    } catch (const text::TokenizerError&) {
    }
    return 0;
  }
  std::vector<int> ids;
  try {
    ids = tok->encode(text);
  } catch (const text::TokenizerError&) {
    return 0;  // a byte without a token
  }
  std::string whole = tok->decode(ids);
  text::StreamDecoder stream(*tok);
  std::string joined;
  for (int id : ids) joined += stream.push(id);
  joined += stream.finish();
  if (joined != whole) fuzz::property_failed("streamed decoding differs from whole decoding");
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<uint8_t>(c) < 0x80;
  bool unknown = file.find("unk_token") != std::string_view::npos;  // unknown bytes decode as it
  if (ascii && !unknown && tok->added_tokens().empty() && whole != text && whole != " " + std::string(text))
    fuzz::property_failed("ASCII text did not round-trip:", std::string(text));
  return 0;
}
