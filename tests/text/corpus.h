// Deterministic varied text for the tokenizer's tests and benchmark: many scripts, emoji
// (with ZWJ sequences, skin tones and flags), code, whitespace runs, numbers, contractions,
// special-token strings, and made-up words from several alphabets. The same seed gives the
// same lines on every machine (a fixed generator, no library distributions).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meganeura::text::testing {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }

 private:
  uint64_t s_;
};

inline const std::vector<std::string_view>& corpus_fragments() {
  static const std::vector<std::string_view> f = {
      // Latin with accents, also decomposed (NFC changes those) and the Angstrom sign
      "café", "naïve", "Zürich", "São Paulo", "façade", "Ærøskøbing", "Łódź", "crème brûlée", "Ångström",
      "e\u0301te\u0301", "\u212B", "Straße", "ÉCOLE", "über", "mañana", "Dvořák", "İstanbul", "ǅemal",
      // Cyrillic, Greek, Arabic, Hebrew, Devanagari
      "Привет", "мир", "ЁЛКА", "Щука", "съешь же ещё этих", "Καλημέρα", "κόσμε", "ΑΒΓΔ", "ψυχή", "مرحبا", "بالعالم",
      "١٢٣٤", "اللغة العربية", "שלום", "עולם", "עִבְרִית", "नमस्ते", "दुनिया", "१२३", "हिन्दी",
      // CJK, Thai, Korean
      "日本語", "中文字符", "漢字かな交じり文", "カタカナ", "ｆｕｌｌｗｉｄｔｈ", "你好，世界。", "สวัสดีครับ", "ภาษาไทย",
      "안녕하세요", "한국어", "ㄱㄴㄷ",
      // emoji: plain, skin tone, ZWJ families, flags, variation selectors, keycaps
      "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵🇰🇷", "❤️", "🧑🏾‍💻",
      "1️⃣", "✨🚀",
      // code
      "int main() {", "return x->y;", "for (i = 0; i < n; ++i)", "def f(x):", "    return x**2", "#include <stdio.h>",
      "a && b || !c", "x = [1, 2, 3]", "console.log(`${a}`);", "<div class=\"x\">", "SELECT * FROM t WHERE id = 42;",
      "std::vector<int>", "0xDEADBEEF", "i += 1", "}\n}", "\"\\n\"",
      // whitespace runs
      " ", "  ", "   ", "\t", "\t\t", "\n", "\r\n", "\n\n", "   \n", " \t ", "\u00a0", "\u3000", " \n ", "\r",
      // digits and long numbers
      "0", "42", "1234567890", "3.14159", "1,000,000", "2024-01-01", "99999999999999999999", "٣", "½", "Ⅻ",
      // contractions in various cases
      "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL", "'D", "don't", "I'M", "we'Re",
      "they'LL", "it's", "You'd", "'", "''",
      // words and punctuation
      "the", "Hello", "WORLD", "tokenizer", "supercalifragilistic", "!", "?!", "...", "—", "«", "»", "“", "”", "(", ")",
      "{", "}", "@", "#", "$", "%", "^", "&", "*", "_", "~", "\\", "/", "|", "…",
      // special-token strings of both vocabularies (plain text to the other one)
      "<|begin_of_text|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "<|endoftext|>", "<think>"};
  return f;
}

// A made-up word from one of a few alphabets (to exercise merges beyond whole-word tokens).
inline std::string made_up_word(Rng& rng) {
  struct Range {
    uint32_t first, count;
  };
  static const Range ranges[] = {{'a', 26},   {'A', 26},      {0xE0, 31},     {0x430, 32},
                                 {0x3B1, 25}, {0x4E00, 2000}, {0xAC00, 2000}, {0x5D0, 27}};
  const Range& r = ranges[rng.below(std::size(ranges))];
  std::string w;
  size_t len = 1 + rng.below(12);
  for (size_t i = 0; i < len; ++i) {
    uint32_t cp = r.first + static_cast<uint32_t>(rng.below(r.count));
    if (cp == 0xF7) cp = 0xE0;  // the division sign is not a letter
    if (cp < 0x80) {
      w += static_cast<char>(cp);
    } else if (cp < 0x800) {
      w += static_cast<char>(0xC0 | (cp >> 6));
      w += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      w += static_cast<char>(0xE0 | (cp >> 12));
      w += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      w += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return w;
}

// `count` lines (which may themselves hold newlines) of 1 to 24 pieces.
inline std::vector<std::string> corpus_lines(size_t count, uint64_t seed) {
  Rng rng(seed);
  const auto& f = corpus_fragments();
  static const char* separators[] = {" ", " ", " ", "", "  ", "\n", "\t", ", ", ". "};
  std::vector<std::string> lines;
  lines.reserve(count);
  for (size_t n = 0; n < count; ++n) {
    std::string line;
    if (rng.below(8) == 0) line += " ";
    size_t pieces = 1 + rng.below(24);
    for (size_t k = 0; k < pieces; ++k) {
      if (k) line += separators[rng.below(std::size(separators))];
      line += rng.below(3) == 0 ? made_up_word(rng) : std::string(f[rng.below(f.size())]);
    }
    if (rng.below(6) == 0) line += std::string(1 + rng.below(3), ' ');
    lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace meganeura::text::testing
