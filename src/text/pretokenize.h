// Pre-tokenization: the split patterns that the byte-level BPE files of GPT-2, SmolLM2,
// Llama 3 and Qwen name, matched by hand. Those patterns use a lookahead, `\s+(?!\S)`, which
// linear-time engines such as RE2 lack; each known pattern string is recognised exactly and
// anything else is refused by the loader.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace meganeura::text {

enum class SplitPattern {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // As kLlama3 with \p{N} (one digit) in place of \p{N}{1,3}.
  kQwen2,
};

// The pattern a tokenizer.json regex string names, or nothing for one we do not know.
std::optional<SplitPattern> known_split_pattern(std::string_view regex);
// The regex string a tokenizer.json writes for the pattern.
std::string_view split_pattern_regex(SplitPattern pattern);

struct PreTokenizerStep {
  enum class Kind { kSplit, kDigits, kByteLevelRegex };
  Kind kind = Kind::kSplit;
  SplitPattern pattern = SplitPattern::kGpt2;  // kSplit
  bool individual_digits = false;              // kDigits
};

// A string decoded to code points with their classes; pieces are [begin, end) code point
// ranges into it.
struct CodePoints {
  std::vector<uint32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<uint32_t> offset;  // byte offset of each code point, and the total length last
  void assign(std::string_view valid_utf8);
};
using Piece = std::pair<uint32_t, uint32_t>;

// Splits the whole of `text` by the steps in order (each refines the pieces of the one
// before; every split is "Isolated": matches and the text between them become pieces).
// Writes the pieces as byte ranges of the text into `out`.
void pre_tokenize(const CodePoints& text, const std::vector<PreTokenizerStep>& steps, std::vector<Piece>& out);

}  // namespace meganeura::text
