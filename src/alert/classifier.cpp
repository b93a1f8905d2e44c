#include "alert/classifier.h"

#include <fmt/format.h>
#include <re2/re2.h>
#include <re2/set.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "alert/evidence.h"
#include "alert/rules.h"
#include "alert/util.h"

namespace meganeura::alert {
namespace {

constexpr size_t kEvidencePerRule = 4;  // first three matches plus the last one
constexpr size_t kMaxEvidenceChars = 400;
// The end of the output that is read first: the last traceback and what follows it, and at
// least this many last lines (where a crash, a launcher or the scheduler says why it ended).
constexpr uint64_t kTailLines = 50;
// Evidence found only before that end (with nothing decisive in it) is context: it still
// names the cause, with less confidence.
constexpr double kEarlyEvidenceFactor = 0.8;

struct RuleHits {
  uint64_t count = 0;
  std::vector<Evidence> first;
  Evidence last;
};

// Where tracebacks start, and where a launcher reported a failed child (torchrun's
// ChildFailedError, a CalledProcessError): such a traceback only points at an earlier one.
struct Landmarks {
  static constexpr size_t kKept = 64;
  std::vector<uint64_t> tracebacks;  // the last kKept, in order
  std::vector<uint64_t> launchers;
  static void note(std::vector<uint64_t>& v, uint64_t line) {
    if (!v.empty() && v.back() == line) return;
    if (v.size() == kKept) v.erase(v.begin());
    v.push_back(line);
  }
};

constexpr std::string_view kTracebackPattern = R"(Traceback \(most recent call last\))";
constexpr std::string_view kLauncherPattern =
    R"(ChildFailedError|CalledProcessError|ProcessExitedException|ProcessRaisedException|exits with return code)";

// Reads lines from a plain or gzip file (gzread handles both transparently).
class LineReader {
 public:
  LineReader(const std::filesystem::path& path, uint64_t offset) {
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr) throw std::runtime_error(fmt::format("[gpualert] cannot read log '{}'", path.string()));
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
  mutable std::vector<int> set_index_to_rule;  // -1, -2: the traceback and launcher landmarks
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
    for (auto [pattern, index] : {std::pair{kTracebackPattern, -1}, std::pair{kLauncherPattern, -2}}) {
      if (set->Add(pattern, nullptr) < 0) throw std::logic_error("[gpualert] bad landmark pattern");
      set_index_to_rule.push_back(index);
    }
    if (!set->Compile()) throw std::logic_error("[gpualert] cannot compile the rule set");
  }

  void scan_line(std::string_view line, uint64_t number, std::vector<RuleHits>& hits, Landmarks& marks,
                 std::vector<int>& matched) const {
    std::call_once(compiled, [this] { compile(); });
    matched.clear();
    if (!set->Match(line, &matched)) return;
    for (int m : matched) {
      const int index = set_index_to_rule[static_cast<size_t>(m)];
      if (index < 0) {
        Landmarks::note(index == -1 ? marks.tracebacks : marks.launchers, number);
        continue;
      }
      auto& h = hits[static_cast<size_t>(index)];
      Evidence ev{number, std::string(line.substr(0, kMaxEvidenceChars))};
      if (h.first.size() < kEvidencePerRule - 1) h.first.push_back(ev);
      h.last = std::move(ev);
      ++h.count;
    }
  }

  // Where the end of the output starts: the first line of the last traceback (of the one
  // before it when the last one is a launcher's report of a failed child; the whole log
  // when there is no other), or the kTailLines-th line from the end, whichever comes first.
  static uint64_t tail_start(const Landmarks& marks, uint64_t lines) {
    uint64_t start = lines > kTailLines ? lines - kTailLines + 1 : 1;
    const auto& tb = marks.tracebacks;
    for (size_t k = tb.size(); k-- > 0;) {
      start = std::min(start, tb[k]);
      const uint64_t next = k + 1 < tb.size() ? tb[k + 1] : UINT64_MAX;
      bool launcher = std::any_of(marks.launchers.begin(), marks.launchers.end(),
                                  [&](uint64_t l) { return l >= tb[k] && l < next; });
      if (!launcher) break;
      if (k == 0) return 1;  // only a launcher's report: the cause is anywhere before it
    }
    return start;
  }

  Classification decide(const std::vector<RuleHits>& hits, const Landmarks& marks, const Evidence& last_line,
                        uint64_t lines, const SystemFacts& f) const;
  std::optional<Classification> pick(const std::vector<RuleHits>& hits, const Evidence& last_line, const SystemFacts& f,
                                     std::optional<uint64_t> tail) const;
};

Classifier::Classifier() : impl_(std::make_unique<Impl>()) { impl_->rules = rule_table(); }

void Classifier::check_rules() const {
  std::call_once(impl_->compiled, [this] { impl_->compile(); });
}

Classifier::~Classifier() = default;

std::vector<ClassInfo> Classifier::classes() {
  std::vector<ClassInfo> out;
  for (const auto& r : rule_table()) out.push_back({r.id, r.label});
  return out;
}

// First the end of the output, the death signal and the system's evidence about this job;
// only when they name nothing specific, the whole log (earlier lines are context).
Classification Classifier::Impl::decide(const std::vector<RuleHits>& hits, const Landmarks& marks,
                                        const Evidence& last_line, uint64_t lines, const SystemFacts& f) const {
  if (auto c = pick(hits, last_line, f, tail_start(marks, lines))) return *c;
  if (auto c = pick(hits, last_line, f, std::nullopt)) return *c;
  throw std::logic_error("[gpualert] the rule table has no catch-all");
}

// With `tail`, a rule matches by text only when it matched at or after that line, and the
// generic outcomes (exit 0, unknown) wait for the second, whole-log pass. Death by a signal
// is decisive in both: an interrupted Python prints a traceback on its way out.
std::optional<Classification> Classifier::Impl::pick(const std::vector<RuleHits>& hits, const Evidence& last_line,
                                                     const SystemFacts& f, std::optional<uint64_t> tail) const {
  bool from_shell = false;
  const std::optional<int> sig = effective_signal(f, from_shell);
  const bool failed = f.signal.has_value() || (f.exit_code && *f.exit_code != 0);
  const bool oom = f.cgroup_oom_kills > 0 || !f.kernel_oom.empty();
  std::vector<std::string> hw_events, app_events;
  for (const auto& e : f.gpu_events) (is_application_xid(xid_of(e)) ? app_events : hw_events).push_back(e);

  for (size_t i = 0; i < rules.size(); ++i) {
    const Rule& r = rules[i];
    if (r.when == When::kFailed && !failed) continue;
    const bool generic = r.fact == Fact::kExitZero || r.fact == Fact::kAlways;
    bool fact = false;
    std::vector<Evidence> fact_evidence;
    switch (r.fact) {
      case Fact::kNone: break;
      case Fact::kHangKilled: fact = f.hang_killed; break;
      case Fact::kTerminated: fact = f.terminated_by_request; break;
      case Fact::kGpuEvent:
        fact = !hw_events.empty();
        for (const auto& e : hw_events) fact_evidence.push_back({0, "NVML: " + e});
        break;
      case Fact::kGpuAppEvent:
        fact = !app_events.empty();
        for (const auto& e : app_events) fact_evidence.push_back({0, "NVML: " + e + " (raised by the application)"});
        break;
      case Fact::kOomKill:
        fact = oom;
        if (f.cgroup_oom_kills > 0)
          fact_evidence.push_back({0, fmt::format("cgroup memory.events: oom_kill +{}", f.cgroup_oom_kills)});
        for (const auto& k : f.kernel_oom) fact_evidence.push_back({0, "kernel: " + k});
        break;
      case Fact::kAnySignal: fact = sig.has_value(); break;
      case Fact::kExitZero: fact = !failed; break;
      case Fact::kAlways: fact = true; break;
    }
    bool by_signal = sig && std::find(r.signals.begin(), r.signals.end(), *sig) != r.signals.end();
    const RuleHits& h = hits[i];
    bool by_text = h.count > 0 && (!tail || h.last.line >= *tail);
    if (tail && generic) fact = false;
    if (!(fact || by_signal || by_text)) continue;

    Classification c;
    c.id = std::string(r.id);
    c.label = std::string(r.label);
    c.remedy = std::string(r.remedy);
    c.evidence = fact_evidence;
    if (sig && (by_signal || r.fact == Fact::kAnySignal || r.fact == Fact::kTerminated))
      c.evidence.push_back({0, from_shell
                                   ? fmt::format("exit status {} (a child died by {})", *f.exit_code, signal_name(*sig))
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
    if ((by_text && (by_signal || fact)) && r.fact != Fact::kAlways)
      conf = std::min(0.99, conf + 0.04);
    else if (!by_text && by_signal && from_shell)
      conf -= 0.1;
    if (!tail && by_text && !fact && !by_signal && !r.pattern.empty()) conf *= kEarlyEvidenceFactor;
    c.confidence = conf;
    return c;
  }
  return std::nullopt;
}

Classification Classifier::classify_text(std::string_view body, const SystemFacts& facts) const {
  std::vector<RuleHits> hits(impl_->rules.size());
  Landmarks marks;
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
    impl_->scan_line(line, number, hits, marks, matched);
    note_last_line(line, number, last);
    // A piece of exactly the limit leaves its '\n' for the next (empty) piece, as the reader does.
    line_ended = len == nl && len < kMaxLogLineBytes;
    body.remove_prefix(line_ended ? len + 1 : len);
  }
  return impl_->decide(hits, marks, last, number, facts);
}

Classification Classifier::classify_file(const std::filesystem::path& log, uint64_t body_offset,
                                         const SystemFacts& facts) const {
  std::vector<RuleHits> hits(impl_->rules.size());
  Landmarks marks;
  std::vector<int> matched;
  LineReader reader(log, body_offset);
  std::string line;
  uint64_t number = 0;
  bool line_ended = true, ended = true;
  Evidence last;
  while (reader.next(line, ended)) {
    if (line_ended) ++number;
    impl_->scan_line(line, number, hits, marks, matched);
    note_last_line(line, number, last);
    line_ended = ended;
  }
  return impl_->decide(hits, marks, last, number, facts);
}

}  // namespace meganeura::alert
