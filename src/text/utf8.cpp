#include "text/utf8.h"

namespace meganeura::text {

namespace {

// The valid range of the second byte for a lead byte (Unicode Table 3-7); the later
// continuation bytes are always 0x80..0xBF.
bool second_byte_ok(uint8_t lead, uint8_t b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  return b >= 0x80 && b <= 0xBF;
}

// Expected length for a lead byte, 0 for a byte that cannot lead.
size_t lead_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Number of bytes at s[i] that form a valid prefix of a sequence (at least 1 for a lead
// byte), and the full length it needs.
size_t valid_prefix(std::string_view s, size_t i, size_t* need) {
  auto lead = static_cast<uint8_t>(s[i]);
  *need = lead_length(lead);
  if (*need == 0) return 0;
  size_t k = 1;
  while (k < *need && i + k < s.size()) {
    auto b = static_cast<uint8_t>(s[i + k]);
    bool ok = k == 1 ? second_byte_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++k;
  }
  return k;
}

}  // namespace

size_t utf8_sequence_length(std::string_view s, size_t i) {
  size_t need = 0;
  size_t k = valid_prefix(s, i, &need);
  return k == need && need > 0 ? need : 0;
}

uint32_t utf8_decode_at(std::string_view s, size_t i, size_t len) {
  auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i + k])); };
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t utf8_first_invalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t len = utf8_sequence_length(s, i);
    if (len == 0) return i;
    i += len;
  }
  return s.size();
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t need = 0;
    size_t k = valid_prefix(s, i, &need);
    if (k == need && need > 0) {
      out.append(s.substr(i, k));
      i += k;
    } else {
      out += "\xEF\xBF\xBD";
      i += k == 0 ? 1 : k;  // a maximal subpart is replaced by one U+FFFD
    }
  }
  return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    size_t i = n - back;
    auto b = static_cast<uint8_t>(s[i]);
    if (b >= 0x80 && b <= 0xBF) continue;  // a continuation byte: look further back
    size_t need = 0;
    size_t k = valid_prefix(s, i, &need);
    return need > back && k == back ? back : 0;
  }
  return 0;
}

}  // namespace meganeura::text
