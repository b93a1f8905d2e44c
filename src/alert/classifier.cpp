#include "alert/classifier.h"

#include <fmt/format.h>
#include <re2/re2.h>
#include <re2/set.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "alert/rules.h"
#include "alert/util.h"

namespace meganeura::alert {
namespace {

constexpr size_t kEvidencePerRule = 4;  // first three matches plus the last one
constexpr size_t kMaxEvidenceChars = 400;

struct RuleHits {
  uint64_t count = 0;
  std::vector<Evidence> first;
  Evidence last;
};

// Reads lines from a plain or gzip file (gzread handles both transparently).
class LineReader {
 public:
  LineReader(const std::filesystem::path& path, uint64_t offset) {
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr)
      throw std::runtime_error(fmt::format("[gpualert] cannot read log '{}'", path.string()));
    if (offset > 0 && gzseek(file_, static_cast<z_off_t>(offset), SEEK_SET) < 0)
      throw std::runtime_error(fmt::format("[gpualert] cannot seek in log '{}'", path.string()));
  }
  ~LineReader() { gzclose(file_); }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line, or the next kMaxLogLineBytes of a longer one; `ended` tells whether the
  // piece ends its line.
  bool next(std::string& line, bool& ended) {
    line.clear();
    ended = true;
    for (;;) {
      if (pos_ == len_) {
        int n = gzread(file_, buf_, sizeof buf_);
        if (n <= 0) return !line.empty();
        pos_ = 0;
        len_ = static_cast<size_t>(n);
      }
      const char* start = buf_ + pos_;
      const size_t avail = std::min(len_ - pos_, kMaxLogLineBytes - line.size());
      const char* nl = static_cast<const char*>(memchr(start, '\n', avail));
      if (nl != nullptr) {
        line.append(start, static_cast<size_t>(nl - start));
        pos_ += static_cast<size_t>(nl - start) + 1;
        return true;
      }
      line.append(start, avail);
      pos_ += avail;
      if (line.size() == kMaxLogLineBytes) {
        ended = false;
        return true;
      }
    }
  }

 private:
  gzFile file_ = nullptr;
  char buf_[1 << 16];
  size_t pos_ = 0;
  size_t len_ = 0;
};

std::optional<int> effective_signal(const SystemFacts& f, bool& from_shell) {
  from_shell = false;
  if (f.signal) return f.signal;
  // A shell or launcher reports a child's death by signal n as exit status 128 + n.
  if (f.exit_code && *f.exit_code > 128 && *f.exit_code < 160) {
    from_shell = true;
    return *f.exit_code - 128;
  }
  return std::nullopt;
}

void note_last_line(std::string_view line, uint64_t number, Evidence& last) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
  last.line = number;
  last.text.assign(line.substr(0, kMaxEvidenceChars));
}

}  // namespace

struct Classifier::Impl {
  std::vector<Rule> rules;
  mutable std::vector<int> set_index_to_rule;
  mutable std::unique_ptr<RE2::Set> set;
  mutable std::once_flag compiled;

  // Compiled on first use: a job without output is classified from its status alone and
  // never pays for building the automaton.
  void compile() const {
    RE2::Options opts;
    opts.set_log_errors(false);
    set = std::make_unique<RE2::Set>(opts, RE2::UNANCHORED);
    for (size_t i = 0; i < rules.size(); ++i) {
      const auto& r = rules[i];
      if (r.pattern.empty()) continue;
      std::string err;
      if (set->Add(r.pattern, &err) < 0)
        throw std::logic_error(fmt::format("[gpualert] rule '{}': bad pattern: {}", r.id, err));
      set_index_to_rule.push_back(static_cast<int>(i));
    }
    if (!set->Compile()) throw std::logic_error("[gpualert] cannot compile the rule set");
  }

  void scan_line(std::string_view line, uint64_t number, std::vector<RuleHits>& hits,
                 std::vector<int>& matched) const {
    std::call_once(compiled, [this] { compile(); });
    matched.clear();
    if (!set->Match(line, &matched)) return;
    for (int m : matched) {
      auto& h = hits[static_cast<size_t>(set_index_to_rule[static_cast<size_t>(m)])];
      Evidence ev{number, std::string(line.substr(0, kMaxEvidenceChars))};
      if (h.first.size() < kEvidencePerRule - 1) h.first.push_back(ev);
      h.last = std::move(ev);
      ++h.count;
    }
  }

  Classification decide(const std::vector<RuleHits>& hits, const Evidence& last_line,
                        const SystemFacts& f) const;
};

Classifier::Classifier() : impl_(std::make_unique<Impl>()) { impl_->rules = rule_table(); }

void Classifier::check_rules() const { std::call_once(impl_->compiled, [this] { impl_->compile(); }); }

Classifier::~Classifier() = default;

std::vector<ClassInfo> Classifier::classes() {
  std::vector<ClassInfo> out;
  for (const auto& r : rule_table()) out.push_back({r.id, r.label});
  return out;
}

Classification Classifier::Impl::decide(const std::vector<RuleHits>& hits,
                                        const Evidence& last_line, const SystemFacts& f) const {
  bool from_shell = false;
  const std::optional<int> sig = effective_signal(f, from_shell);
  const bool failed = f.signal.has_value() || (f.exit_code && *f.exit_code != 0);
  const bool oom = f.cgroup_oom_kills > 0 || !f.kernel_oom.empty();

  for (size_t i = 0; i < rules.size(); ++i) {
    const Rule& r = rules[i];
    if (r.when == When::kFailed && !failed) continue;
    bool fact = false;
    std::vector<Evidence> fact_evidence;
    switch (r.fact) {
      case Fact::kNone: break;
      case Fact::kHangKilled: fact = f.hang_killed; break;
      case Fact::kTerminated: fact = f.terminated_by_request; break;
      case Fact::kGpuEvent:
        fact = !f.gpu_events.empty();
        for (const auto& e : f.gpu_events) fact_evidence.push_back({0, "NVML: " + e});
        break;
      case Fact::kOomKill:
        fact = oom;
        if (f.cgroup_oom_kills > 0)
          fact_evidence.push_back(
              {0, fmt::format("cgroup memory.events: oom_kill +{}", f.cgroup_oom_kills)});
        for (const auto& k : f.kernel_oom) fact_evidence.push_back({0, "kernel: " + k});
        break;
      case Fact::kAnySignal: fact = sig.has_value(); break;
      case Fact::kExitZero: fact = !failed; break;
      case Fact::kAlways: fact = true; break;
    }
    bool by_signal = sig && std::find(r.signals.begin(), r.signals.end(), *sig) != r.signals.end();
    const RuleHits& h = hits[i];
    bool by_text = h.count > 0;
    if (!(fact || by_signal || by_text)) continue;

    Classification c;
    c.id = std::string(r.id);
    c.label = std::string(r.label);
    c.remedy = std::string(r.remedy);
    c.evidence = fact_evidence;
    if (sig && (by_signal || r.fact == Fact::kAnySignal || r.fact == Fact::kTerminated))
      c.evidence.push_back({0, from_shell ? fmt::format("exit status {} (a child died by {})",
                                                        *f.exit_code, signal_name(*sig))
                                          : fmt::format("terminated by {}", signal_name(*sig))});
    if (r.fact == Fact::kTerminated && f.terminated_by_request)
      c.evidence.push_back({0, "gpualert received SIGTERM/SIGHUP or the timeout expired"});
    if (r.fact == Fact::kHangKilled && fact)
      c.evidence.push_back({0, "no output for the --hang-after period; ended by gpualert"});
    for (const auto& e : h.first) c.evidence.push_back(e);
    if (h.count > h.first.size()) c.evidence.push_back(h.last);
    // Generic outcomes point at how the output ended and what the status was.
    if (r.pattern.empty() || r.id == "traceback" || r.id == "runtime_error") {
      if (!sig && f.exit_code) c.evidence.push_back({0, fmt::format("exit status {}", *f.exit_code)});
      if (last_line.line != 0 && (c.evidence.empty() || c.evidence.back().line != last_line.line))
        c.evidence.push_back(last_line);
    }
    // Agreement between independent sources raises confidence; a lone status lowers it.
    double conf = r.confidence;
    if ((by_text && (by_signal || fact)) && r.fact != Fact::kAlways) conf = std::min(0.99, conf + 0.04);
    else if (!by_text && by_signal && from_shell) conf -= 0.1;
    c.confidence = conf;
    return c;
  }
  throw std::logic_error("[gpualert] the rule table has no catch-all");
}

Classification Classifier::classify_text(std::string_view body, const SystemFacts& facts) const {
  std::vector<RuleHits> hits(impl_->rules.size());
  std::vector<int> matched;
  uint64_t number = 0;
  bool line_ended = true;
  Evidence last;
  // Pieces exactly as LineReader cuts them, so a file and its text classify alike.
  while (!body.empty()) {
    size_t nl = body.find('\n');
    const size_t len = std::min(nl == std::string_view::npos ? body.size() : nl, kMaxLogLineBytes);
    std::string_view line = body.substr(0, len);
    if (line_ended) ++number;
    impl_->scan_line(line, number, hits, matched);
    note_last_line(line, number, last);
    // A piece of exactly the limit leaves its '\n' for the next (empty) piece, as the reader does.
    line_ended = len == nl && len < kMaxLogLineBytes;
    body.remove_prefix(line_ended ? len + 1 : len);
  }
  return impl_->decide(hits, last, facts);
}

Classification Classifier::classify_file(const std::filesystem::path& log, uint64_t body_offset,
                                         const SystemFacts& facts) const {
  std::vector<RuleHits> hits(impl_->rules.size());
  std::vector<int> matched;
  LineReader reader(log, body_offset);
  std::string line;
  uint64_t number = 0;
  bool line_ended = true, ended = true;
  Evidence last;
  while (reader.next(line, ended)) {
    if (line_ended) ++number;
    impl_->scan_line(line, number, hits, matched);
    note_last_line(line, number, last);
    line_ended = ended;
  }
  return impl_->decide(hits, last, facts);
}

}  // namespace meganeura::alert
