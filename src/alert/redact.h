// Masking of user-chosen patterns (--redact REGEX, [run] redact) in everything a
// notification carries: command line, working directory, log tail, evidence, and the text
// of attachments. The job's own log on disk is kept as written.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "alert/report.h"

namespace re2 {
class RE2;
}

namespace meganeura::alert {

inline constexpr std::string_view kRedacted = "[redacted]";

class Redactor {
 public:
  Redactor();
  // Throws std::invalid_argument naming the first pattern RE2 cannot compile.
  explicit Redactor(const std::vector<std::string>& patterns);
  ~Redactor();
  Redactor(Redactor&&) noexcept;
  Redactor& operator=(Redactor&&) noexcept;

  bool empty() const { return re_ == nullptr; }
  void apply(std::string& text) const;
  // A copy of `report` with every field that is sent masked.
  Report redacted(const Report& report) const;

 private:
  std::unique_ptr<re2::RE2> re_;
};

}  // namespace meganeura::alert
