#include "text/pretokenize.h"

#include <algorithm>

#include "text/unicode.h"
#include "text/utf8.h"

namespace meganeura::text {

namespace {

constexpr std::string_view kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr uint8_t kOtherMask = kLetter | kNumber | kSpace;  // [^\s\p{L}\p{N}] has none of them

// Matches one pattern at a position of a piece; each alternative is tried in order, as a
// backtracking engine does (leftmost-first), with the backtracking worked out by hand.
class Matcher {
 public:
  Matcher(const CodePoints& t, uint32_t end) : cp_(t.cp), cls_(t.cls), end_(end) {}

  // Code points matched at i (0: no match there).
  uint32_t match(SplitPattern p, uint32_t i) const {
    bool gpt2 = p == SplitPattern::kGpt2;
    if (uint32_t n = contraction(i, !gpt2)) return n;
    if (gpt2) {
      if (uint32_t n = space_then_run(i, kLetter)) return n;
      if (uint32_t n = space_then_run(i, kNumber)) return n;
      if (uint32_t n = space_then_other(i, false)) return n;
    } else {
      if (uint32_t n = prefixed_letters(i)) return n;
      if (has(i, kNumber)) return std::min(run(i, kNumber), p == SplitPattern::kLlama3 ? 3u : 1u);
      if (uint32_t n = space_then_other(i, true)) return n;
      if (uint32_t n = spaces_then_newlines(i)) return n;
    }
    uint32_t ws = run(i, kSpace);
    if (ws == 0) return 0;
    if (i + ws == end_) return ws;  // \s+(?!\S) at the end
    return ws >= 2 ? ws - 1 : ws;   // \s+(?!\S) leaving one space to the next word, else \s+
  }

 private:
  bool has(uint32_t i, uint8_t bits) const { return i < end_ && (cls_[i] & bits); }
  bool other(uint32_t i) const { return i < end_ && !(cls_[i] & kOtherMask); }
  uint32_t run(uint32_t i, uint8_t bits) const {
    uint32_t j = i;
    while (j < end_ && (cls_[j] & bits)) ++j;
    return j - i;
  }
  uint32_t run_other(uint32_t i) const {
    uint32_t j = i;
    while (other(j)) ++j;
    return j - i;
  }
  static uint32_t fold(uint32_t c, bool ignore_case) {
    if (!ignore_case) return c;
    if (c >= 'A' && c <= 'Z') return c + 32;
    return c == 0x17F ? 's' : c;  // LATIN SMALL LETTER LONG S folds to s
  }
  // 's|'t|'re|'ve|'m|'ll|'d
  uint32_t contraction(uint32_t i, bool ignore_case) const {
    if (i + 1 >= end_ || cp_[i] != '\'') return 0;
    uint32_t a = fold(cp_[i + 1], ignore_case);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= end_) return 0;
    uint32_t b = fold(cp_[i + 2], ignore_case);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
  }
  // ` ?X+` for a class X.
  uint32_t space_then_run(uint32_t i, uint8_t bits) const {
    if (i < end_ && cp_[i] == ' ' && has(i + 1, bits)) return 1 + run(i + 1, bits);
    return run(i, bits);
  }
  // ` ?[^\s\p{L}\p{N}]+`, then `[\r\n]*` where asked.
  uint32_t space_then_other(uint32_t i, bool newlines) const {
    uint32_t j = i;
    if (i < end_ && cp_[i] == ' ' && other(i + 1)) j = i + 1;
    uint32_t n = run_other(j);
    if (n == 0) return 0;
    j += n;
    if (newlines) j += run(j, kNewline);
    return j - i;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  uint32_t prefixed_letters(uint32_t i) const {
    if (i < end_ && !(cls_[i] & (kNewline | kLetter | kNumber)) && has(i + 1, kLetter)) return 1 + run(i + 1, kLetter);
    return run(i, kLetter);
  }
  // \s*[\r\n]+: the greedy \s* gives back until the last newline of the space run.
  uint32_t spaces_then_newlines(uint32_t i) const {
    uint32_t ws = run(i, kSpace);
    for (uint32_t k = ws; k > 0; --k) {
      if (cls_[i + k - 1] & kNewline) return k;
    }
    return 0;
  }

  const std::vector<uint32_t>& cp_;
  const std::vector<uint8_t>& cls_;
  uint32_t end_;
};

void split_piece(const CodePoints& t, Piece piece, SplitPattern p, std::vector<Piece>& out) {
  Matcher m(t, piece.second);
  uint32_t gap = piece.first;  // start of text not yet matched
  uint32_t i = piece.first;
  while (i < piece.second) {
    uint32_t n = m.match(p, i);
    if (n == 0) {
      ++i;
      continue;
    }
    if (gap < i) out.emplace_back(gap, i);
    out.emplace_back(i, i + n);
    i += n;
    gap = i;
  }
  if (gap < piece.second) out.emplace_back(gap, piece.second);
}

void split_digits(const CodePoints& t, Piece piece, bool individual, std::vector<Piece>& out) {
  uint32_t i = piece.first;
  while (i < piece.second) {
    uint32_t j = i + 1;
    bool digit = t.cls[i] & kNumber;
    if (!(digit && individual)) {
      while (j < piece.second && static_cast<bool>(t.cls[j] & kNumber) == digit) ++j;
    }
    out.emplace_back(i, j);
    i = j;
  }
}

}  // namespace

std::string_view split_pattern_regex(SplitPattern p) {
  return p == SplitPattern::kGpt2 ? kGpt2Regex : p == SplitPattern::kLlama3 ? kLlama3Regex : kQwen2Regex;
}

std::optional<SplitPattern> known_split_pattern(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kLlama3Regex) return SplitPattern::kLlama3;
  if (regex == kQwen2Regex) return SplitPattern::kQwen2;
  return std::nullopt;
}

void CodePoints::assign(std::string_view s) {
  cp.clear();
  cls.clear();
  offset.clear();
  size_t i = 0;
  while (i < s.size()) {
    size_t len = utf8_sequence_length(s, i);
    if (len == 0) len = 1;  // callers pass valid UTF-8; a stray byte stays one unit
    uint32_t c = utf8_decode_at(s, i, len);
    cp.push_back(c);
    cls.push_back(char_class(c));
    offset.push_back(static_cast<uint32_t>(i));
    i += len;
  }
  offset.push_back(static_cast<uint32_t>(s.size()));
}

void pre_tokenize(const CodePoints& text, const std::vector<PreTokenizerStep>& steps, std::vector<Piece>& out) {
  std::vector<Piece> pieces{{0, static_cast<uint32_t>(text.cp.size())}}, next;
  if (text.cp.empty()) pieces.clear();
  for (const PreTokenizerStep& s : steps) {
    next.clear();
    for (Piece p : pieces) {
      switch (s.kind) {
        case PreTokenizerStep::Kind::kSplit: split_piece(text, p, s.pattern, next); break;
        case PreTokenizerStep::Kind::kByteLevelRegex: split_piece(text, p, SplitPattern::kGpt2, next); break;
        case PreTokenizerStep::Kind::kDigits: split_digits(text, p, s.individual_digits, next); break;
      }
    }
    pieces.swap(next);
  }
  out.clear();
  for (Piece p : pieces) out.emplace_back(text.offset[p.first], text.offset[p.second]);
}

}  // namespace meganeura::text
