#include "alert/mime.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <random>

#include "alert/util.h"

namespace meganeura::alert {
namespace {

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80 || c == '\r' || c == '\n') return false;
  return true;
}

// RFC 2047 encoded-words for non-ASCII header text, and for text too long for one header line
// (RFC 5322: at most 998 characters). Words of 45 bytes (72 characters) go on folded lines.
std::string header_text(std::string_view s) {
  if (is_ascii(s) && s.size() <= 900) return std::string(s);
  std::string clean(s);
  for (auto& c : clean)
    if (c == '\r' || c == '\n') c = ' ';
  std::string out;
  for (size_t i = 0; i < clean.size();) {
    size_t n = std::min<size_t>(45, clean.size() - i);
    // A character's UTF-8 bytes stay in one word.
    while (n > 1 && i + n < clean.size() && (static_cast<unsigned char>(clean[i + n]) & 0xC0) == 0x80) --n;
    out += (out.empty() ? "=?UTF-8?B?" : "\r\n =?UTF-8?B?") + base64_encode(clean.substr(i, n), 0) + "?=";
    i += n;
  }
  return out;
}

// Addresses go into headers verbatim: a CR or LF in one would end the header and start another.
std::string one_line(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c == '\r' || c == '\n') c = ' ';
  return out;
}

std::string rfc2822_date() { return utc_time(wall_now(), "%a, %d %b %Y %H:%M:%S +0000"); }

std::string random_token() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

// Quoted-printable would keep the text readable in raw form, but base64 is simpler to get
// exactly right for arbitrary log bytes and long lines.
void add_text_part(std::string& out, const std::string& boundary, std::string_view type, std::string_view body) {
  out += fmt::format(
      "--{}\r\nContent-Type: {}; charset=utf-8\r\nContent-Transfer-Encoding: "
      "base64\r\n\r\n{}",
      boundary, type, base64_encode(body));
}

}  // namespace

std::string base64_encode(std::string_view data, size_t line_length) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve(data.size() * 4 / 3 + data.size() / 50 + 8);
  size_t col = 0;
  auto put = [&](char c) {
    out += c;
    if (line_length && ++col == line_length) {
      out += "\r\n";
      col = 0;
    }
  };
  size_t i = 0;
  for (; i + 2 < data.size(); i += 3) {
    uint32_t v = (static_cast<unsigned char>(data[i]) << 16) | (static_cast<unsigned char>(data[i + 1]) << 8) |
                 static_cast<unsigned char>(data[i + 2]);
    put(kAlphabet[(v >> 18) & 63]);
    put(kAlphabet[(v >> 12) & 63]);
    put(kAlphabet[(v >> 6) & 63]);
    put(kAlphabet[v & 63]);
  }
  if (i < data.size()) {
    uint32_t v = static_cast<unsigned char>(data[i]) << 16;
    if (i + 1 < data.size()) v |= static_cast<unsigned char>(data[i + 1]) << 8;
    put(kAlphabet[(v >> 18) & 63]);
    put(kAlphabet[(v >> 12) & 63]);
    put(i + 1 < data.size() ? kAlphabet[(v >> 6) & 63] : '=');
    put('=');
  }
  if (line_length && col != 0) out += "\r\n";
  return out;
}

std::string build_email(const EmailParts& p) {
  std::string token = random_token();
  std::string mixed = "mixed-" + token;
  std::string alt = "alt-" + token;
  std::string to;
  for (const auto& r : p.to) to += (to.empty() ? "" : ", ") + one_line(r);
  std::string domain = hostname();
  std::string out;
  out += fmt::format("From: {}\r\nTo: {}\r\nSubject: {}\r\nDate: {}\r\nMessage-ID: <{}.{}@{}>\r\n", one_line(p.from),
                     to, header_text(p.subject), rfc2822_date(), token, getpid(), domain);
  out += "MIME-Version: 1.0\r\nX-Mailer: gpualert\r\n";
  out += fmt::format("Content-Type: multipart/mixed; boundary=\"{}\"\r\n\r\n", mixed);
  out += "This is a multi-part message in MIME format.\r\n";
  out += fmt::format("--{}\r\nContent-Type: multipart/alternative; boundary=\"{}\"\r\n\r\n", mixed, alt);
  add_text_part(out, alt, "text/plain", p.text);
  add_text_part(out, alt, "text/html", p.html);
  out += fmt::format("--{}--\r\n", alt);
  for (const auto& a : p.attachments) {
    std::string name;
    for (char c : a.name) name += (c == '"' || c == '\\' || c == '\r' || c == '\n') ? '_' : c;
    out += fmt::format(
        "--{}\r\nContent-Type: {}; name=\"{}\"\r\nContent-Disposition: attachment; "
        "filename=\"{}\"\r\nContent-Transfer-Encoding: base64\r\n\r\n{}",
        mixed, a.content_type, name, name, base64_encode(a.data));
  }
  out += fmt::format("--{}--\r\n", mixed);
  return out;
}

}  // namespace meganeura::alert
