#include "alert/redact.h"

#include <fmt/format.h>
#include <re2/re2.h>

#include <stdexcept>

namespace meganeura::alert {

Redactor::Redactor(const std::vector<std::string>& patterns) {
  if (patterns.empty()) return;
  std::string combined;
  for (const auto& p : patterns) {
    RE2 one(p, RE2::Quiet);
    if (!one.ok())
      throw std::invalid_argument(fmt::format("[gpualert] --redact: bad pattern '{}': {}", p, one.error()));
    if (one.pattern().empty() || RE2::FullMatch("", one))
      throw std::invalid_argument(fmt::format("[gpualert] --redact: pattern '{}' matches the empty string", p));
    combined += (combined.empty() ? "" : "|") + fmt::format("(?:{})", p);
  }
  re_ = std::make_unique<RE2>(combined, RE2::Quiet);
}

Redactor::Redactor() = default;
Redactor::~Redactor() = default;
Redactor::Redactor(Redactor&&) noexcept = default;
Redactor& Redactor::operator=(Redactor&&) noexcept = default;

void Redactor::apply(std::string& text) const {
  if (re_ != nullptr) RE2::GlobalReplace(&text, *re_, std::string(kRedacted));
}

Report Redactor::redacted(const Report& report) const {
  Report r = report;
  if (re_ == nullptr) return r;
  for (auto& a : r.argv) apply(a);
  apply(r.command);
  apply(r.cwd);
  apply(r.log_path);
  apply(r.job_dir);
  for (auto& l : r.last_lines) apply(l);
  for (auto& e : r.classification.evidence) apply(e.text);
  for (auto& [k, v] : r.slurm) apply(v);
  for (auto& a : r.attachments) apply(a.source);
  for (auto& s : r.skipped) apply(s.path);
  return r;
}

}  // namespace meganeura::alert
