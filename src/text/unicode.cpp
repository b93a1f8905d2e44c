#include "text/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <array>
#include <memory>
#include <stdexcept>

namespace meganeura::text {

namespace {

uint8_t class_from_icu(uint32_t cp) {
  auto c = static_cast<UChar32>(cp);
  uint8_t bits = 0;
  int8_t type = u_charType(c);
  switch (type) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER: bits |= kLetter; break;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER: bits |= kNumber; break;
    default: break;
  }
  if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) bits |= kSpace;
  if (cp == '\r' || cp == '\n') bits |= kNewline;
  return bits;
}

const std::array<uint8_t, 0x10000>& bmp_table() {
  static const auto table = [] {
    auto t = std::make_unique<std::array<uint8_t, 0x10000>>();
    for (uint32_t cp = 0; cp < 0x10000; ++cp) (*t)[cp] = class_from_icu(cp);
    return t;
  }();
  return *table;
}

const icu::Normalizer2* normalizer(NormalForm form) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNFC: n = icu::Normalizer2::getNFCInstance(err); break;
    case NormalForm::kNFD: n = icu::Normalizer2::getNFDInstance(err); break;
    case NormalForm::kNFKC: n = icu::Normalizer2::getNFKCInstance(err); break;
    case NormalForm::kNFKD: n = icu::Normalizer2::getNFKDInstance(err); break;
  }
  if (U_FAILURE(err) || n == nullptr)
    throw std::runtime_error(std::string("tokenizer: ICU normaliser unavailable: ") + u_errorName(err));
  return n;
}

}  // namespace

uint8_t char_class(uint32_t cp) { return cp < 0x10000 ? bmp_table()[cp] : class_from_icu(cp); }

std::string normalize(std::string_view s, NormalForm form) {
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<uint8_t>(c) < 0x80;
  if (ascii) return std::string(s);  // ASCII is in every normal form
  const icu::Normalizer2* n = normalizer(form);
  UErrorCode err = U_ZERO_ERROR;
  icu::StringPiece piece(s.data(), static_cast<int32_t>(s.size()));
  if (n->isNormalizedUTF8(piece, err) && U_SUCCESS(err)) return std::string(s);
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  err = U_ZERO_ERROR;
  n->normalizeUTF8(0, piece, sink, nullptr, err);
  if (U_FAILURE(err)) throw std::runtime_error(std::string("tokenizer: normalisation failed: ") + u_errorName(err));
  return out;
}

}  // namespace meganeura::text
