// Quoting of names taken from files for one-line error messages.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace meganeura::io::detail {

// 'text' with control characters shown as \xNN, so a hostile name cannot break the line.
inline std::string quote_name(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", u);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace meganeura::io::detail
