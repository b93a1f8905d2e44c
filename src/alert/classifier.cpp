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

// Where tracebacks start, and what says that a traceback is not how the job ended: a
// launcher's report of a failed child (torchrun's ChildFailedError, a CalledProcessError)
// only points at an earlier traceback, and so does a chained exception ("During handling of
// the above exception, ...").
struct Landmarks {
  static constexpr size_t kKept = 64;
  std::vector<uint64_t> tracebacks;  // the last kKept, in order
  std::vector<uint64_t> launchers;
  std::vector<uint64_t> chained;
  static void note(std::vector<uint64_t>& v, uint64_t line) {
    if (!v.empty() && v.back() == line) return;
    if (v.size() == kKept) v.erase(v.begin());
    v.push_back(line);
  }
  static bool any_in(const std::vector<uint64_t>& v, uint64_t from, uint64_t to) {
    return std::any_of(v.begin(), v.end(), [&](uint64_t l) { return l >= from && l < to; });
  }
};

// Lines that are not about how a job ended, whatever failure word they contain.
enum class Marker {
  kTraceback = -1,
  kLauncher = -2,
  kChained = -3,
  kIgnored = -4,  // "Exception ignored in ...": Python reports it and goes on
  kSetting = -5,  // a setting, a threshold, a retry policy, a success or status message
  kFailure = -6,  // words that make a line about a failure after all
};

constexpr std::pair<std::string_view, Marker> kMarkers[] = {
    {R"(Traceback \(most recent call last\))", Marker::kTraceback},
    {R"(ChildFailedError|CalledProcessError|ProcessExitedException|ProcessRaisedException|exits with return code)",
     Marker::kLauncher},
    {R"(During handling of the above exception|The above exception was the direct cause)", Marker::kChained},
    {R"(^Exception ignored in)", Marker::kIgnored},
    {R"((?i)\bthreshold|\bretry\b|\bretries\b|\bretrying\b|will retry|attempting to recover|\bpolicy\b|\(ok\)|)"
     R"(\bsuccessfully\b|\bsucceeded\b|^\s*[\w.-]+\s*[=:]\s*(true|false|none|null|[-+]?[\d.]+\s*[kmgt]?i?b?)\s*,?\s*$|)"
     R"(^\s*Namespace\(|^\s*--[\w-]+[ =])",
     Marker::kSetting},
    {R"((?i)error|exception|fatal|fail|abort|kill|traceback|panic|cannot|can't|could not|unable|denied|exitcode|)"
     R"(signal|segmentation|core dumped)",
     Marker::kFailure},
};

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

// What one pass over the output gathered.
struct Scan {
  explicit Scan(size_t rules) : hits(rules) {}
  std::vector<RuleHits> hits;
  Landmarks marks;
  Evidence last_line;
  uint64_t lines = 0;
  // An "Exception ignored in" report: 1 until its traceback starts, 2 inside it. Its lines
  // are not evidence; it ends with the exception line (the first one not indented).
  int ignored_block = 0;
  std::vector<int> matched;  // reused for every line
};

void note_last_line(std::string_view line, uint64_t number, Evidence& last) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
  last.line = number;
  last.text.assign(line.substr(0, kMaxEvidenceChars));
}

// Advances the "Exception ignored in" state for this line; true when the line belongs to
// such a report.
bool in_ignored_report(Scan& s, bool starts_report, bool traceback_header, std::string_view line) {
  if (starts_report) {
    s.ignored_block = 1;
    return true;
  }
  if (s.ignored_block == 1) {
    if (traceback_header) s.ignored_block = 2;
    return true;
  }
  if (s.ignored_block == 2) {
    const bool frame = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    if (!frame) s.ignored_block = 0;  // the report's exception line, its last
    return true;
  }
  return false;
}

}  // namespace

struct Classifier::Impl {
  std::vector<Rule> rules;
  mutable std::vector<int> set_index_to_rule;  // negative: a Marker
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
    for (const auto& [pattern, marker] : kMarkers) {
      std::string err;
      if (set->Add(pattern, &err) < 0) throw std::logic_error("[gpualert] bad landmark pattern: " + err);
      set_index_to_rule.push_back(static_cast<int>(marker));
    }
    if (!set->Compile()) throw std::logic_error("[gpualert] cannot compile the rule set");
  }

  void scan_line(std::string_view line, uint64_t number, Scan& s) const {
    std::call_once(compiled, [this] { compile(); });
    s.matched.clear();
    set->Match(line, &s.matched);
    bool has[7] = {};
    for (int m : s.matched) {
      const int index = set_index_to_rule[static_cast<size_t>(m)];
      if (index < 0) has[-index] = true;
    }
    const bool traceback = has[-static_cast<int>(Marker::kTraceback)];
    if (in_ignored_report(s, has[-static_cast<int>(Marker::kIgnored)], traceback, line)) return;
    if (traceback) Landmarks::note(s.marks.tracebacks, number);
    if (has[-static_cast<int>(Marker::kLauncher)]) Landmarks::note(s.marks.launchers, number);
    if (has[-static_cast<int>(Marker::kChained)]) Landmarks::note(s.marks.chained, number);
    note_last_line(line, number, s.last_line);
    // A setting ("oom_retry: 3"), a threshold or a success line names a failure it did not have.
    if (has[-static_cast<int>(Marker::kSetting)] && !has[-static_cast<int>(Marker::kFailure)]) return;
    for (int m : s.matched) {
      const int index = set_index_to_rule[static_cast<size_t>(m)];
      if (index >= 0) record_hit(s.hits[static_cast<size_t>(index)], line, number);
    }
  }

  static void record_hit(RuleHits& h, std::string_view line, uint64_t number) {
    Evidence ev{number, std::string(line.substr(0, kMaxEvidenceChars))};
    if (h.first.size() < kEvidencePerRule - 1) h.first.push_back(ev);
    h.last = std::move(ev);
    ++h.count;
  }

  // Where the end of the output starts: the first line of the last traceback, or the
  // kTailLines-th line from the end, whichever comes first. A traceback that is a launcher's
  // report of a failed child, or an exception raised while handling another, extends the end
  // back to the traceback before it (to the top of the log when there is none).
  static uint64_t tail_start(const Landmarks& marks, uint64_t lines) {
    uint64_t start = lines > kTailLines ? lines - kTailLines + 1 : 1;
    const auto& tb = marks.tracebacks;
    for (size_t k = tb.size(); k-- > 0;) {
      start = std::min(start, tb[k]);
      const uint64_t previous = k > 0 ? tb[k - 1] : 0;
      const uint64_t next = k + 1 < tb.size() ? tb[k + 1] : UINT64_MAX;
      const bool points_back =
          Landmarks::any_in(marks.launchers, tb[k], next) || Landmarks::any_in(marks.chained, previous, tb[k]);
      if (!points_back) break;
      if (k == 0) return 1;
    }
    return start;
  }

  Classification decide(const Scan& s, const SystemFacts& f) const;
  std::optional<Classification> pick(const Scan& s, const SystemFacts& f, std::optional<uint64_t> tail) const;
};

namespace {

// What the system's own evidence says for one rule.
struct FactMatch {
  bool matched = false;
  std::vector<Evidence> evidence;
};

FactMatch match_fact(Fact fact, const SystemFacts& f, bool failed, bool by_any_signal) {
  FactMatch m;
  std::vector<std::string> hw_events, app_events;
  for (const auto& e : f.gpu_events) (is_application_xid(xid_of(e)) ? app_events : hw_events).push_back(e);
  switch (fact) {
    case Fact::kNone: break;
    case Fact::kHangKilled: m.matched = f.hang_killed; break;
    case Fact::kTerminated: m.matched = f.terminated_by_request; break;
    case Fact::kGpuEvent:
      m.matched = !hw_events.empty();
      for (const auto& e : hw_events) m.evidence.push_back({0, "NVML: " + e});
      break;
    case Fact::kGpuAppEvent:
      m.matched = !app_events.empty();
      for (const auto& e : app_events) m.evidence.push_back({0, "NVML: " + e + " (raised by the application)"});
      break;
    case Fact::kOomKill:
      m.matched = f.cgroup_oom_kills > 0 || !f.kernel_oom.empty();
      if (f.cgroup_oom_kills > 0)
        m.evidence.push_back({0, fmt::format("cgroup memory.events: oom_kill +{}", f.cgroup_oom_kills)});
      for (const auto& k : f.kernel_oom) m.evidence.push_back({0, "kernel: " + k});
      break;
    case Fact::kAnySignal: m.matched = by_any_signal; break;
    case Fact::kExitZero: m.matched = !failed; break;
    case Fact::kAlways: m.matched = true; break;
  }
  return m;
}

// How the rule matched, for the evidence and the confidence.
struct RuleMatch {
  const Rule* rule;
  const RuleHits* hits;
  FactMatch fact;
  std::optional<int> sig;
  bool from_shell;
  bool by_signal;
  bool by_text;
  bool whole_log;  // the second pass: the text matched only before the end of the output
};

std::vector<Evidence> gather_evidence(const RuleMatch& m, const SystemFacts& f, const Evidence& last_line) {
  const Rule& r = *m.rule;
  std::vector<Evidence> ev = m.fact.evidence;
  if (m.sig && (m.by_signal || r.fact == Fact::kAnySignal || r.fact == Fact::kTerminated))
    ev.push_back({0, m.from_shell
                         ? fmt::format("exit status {} (a child died by {})", *f.exit_code, signal_name(*m.sig))
                         : fmt::format("terminated by {}", signal_name(*m.sig))});
  if (r.fact == Fact::kTerminated && f.terminated_by_request)
    ev.push_back({0, "gpualert received SIGTERM/SIGHUP or the timeout expired"});
  if (r.fact == Fact::kHangKilled && m.fact.matched)
    ev.push_back({0, "no output for the --hang-after period; ended by gpualert"});
  for (const auto& e : m.hits->first) ev.push_back(e);
  if (m.hits->count > m.hits->first.size()) ev.push_back(m.hits->last);
  // Generic outcomes point at how the output ended and what the status was.
  if (r.pattern.empty() || r.id == "traceback" || r.id == "runtime_error") {
    if (!m.sig && f.exit_code) ev.push_back({0, fmt::format("exit status {}", *f.exit_code)});
    if (last_line.line != 0 && (ev.empty() || ev.back().line != last_line.line)) ev.push_back(last_line);
  }
  return ev;
}

// Agreement between independent sources raises confidence; a lone status lowers it.
double confidence_of(const RuleMatch& m) {
  const Rule& r = *m.rule;
  double conf = r.confidence;
  if ((m.by_text && (m.by_signal || m.fact.matched)) && r.fact != Fact::kAlways)
    conf = std::min(0.99, conf + 0.04);
  else if (!m.by_text && m.by_signal && m.from_shell)
    conf -= 0.1;
  if (m.whole_log && m.by_text && !m.fact.matched && !m.by_signal && !r.pattern.empty()) conf *= kEarlyEvidenceFactor;
  return conf;
}

}  // namespace

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
Classification Classifier::Impl::decide(const Scan& s, const SystemFacts& f) const {
  if (auto c = pick(s, f, tail_start(s.marks, s.lines))) return *c;
  if (auto c = pick(s, f, std::nullopt)) return *c;
  throw std::logic_error("[gpualert] the rule table has no catch-all");
}

// With `tail`, a rule matches by text only when it matched at or after that line, and the
// generic outcomes (exit 0, unknown) wait for the second, whole-log pass. Death by a signal
// is decisive in both: an interrupted Python prints a traceback on its way out.
std::optional<Classification> Classifier::Impl::pick(const Scan& s, const SystemFacts& f,
                                                     std::optional<uint64_t> tail) const {
  bool from_shell = false;
  const std::optional<int> sig = effective_signal(f, from_shell);
  const bool failed = f.signal.has_value() || (f.exit_code && *f.exit_code != 0);
  for (size_t i = 0; i < rules.size(); ++i) {
    const Rule& r = rules[i];
    if (r.when == When::kFailed && !failed) continue;
    const RuleHits& h = s.hits[i];
    RuleMatch m{&r, &h, match_fact(r.fact, f, failed, sig.has_value()), sig, from_shell, false, false, !tail};
    m.by_signal = sig && std::find(r.signals.begin(), r.signals.end(), *sig) != r.signals.end();
    m.by_text = h.count > 0 && (!tail || h.last.line >= *tail);
    const bool generic = r.fact == Fact::kExitZero || r.fact == Fact::kAlways;
    if (tail && generic) m.fact.matched = false;
    if (!(m.fact.matched || m.by_signal || m.by_text)) continue;
    return Classification{std::string(r.id), std::string(r.label), std::string(r.remedy), confidence_of(m),
                          gather_evidence(m, f, s.last_line)};
  }
  return std::nullopt;
}

Classification Classifier::classify_text(std::string_view body, const SystemFacts& facts) const {
  Scan s(impl_->rules.size());
  bool line_ended = true;
  // Pieces exactly as LineReader cuts them, so a file and its text classify alike.
  while (!body.empty()) {
    size_t nl = body.find('\n');
    const size_t len = std::min(nl == std::string_view::npos ? body.size() : nl, kMaxLogLineBytes);
    std::string_view line = body.substr(0, len);
    if (line_ended) ++s.lines;
    impl_->scan_line(line, s.lines, s);
    // A piece of exactly the limit leaves its '\n' for the next (empty) piece, as the reader does.
    line_ended = len == nl && len < kMaxLogLineBytes;
    body.remove_prefix(line_ended ? len + 1 : len);
  }
  return impl_->decide(s, facts);
}

Classification Classifier::classify_file(const std::filesystem::path& log, uint64_t body_offset,
                                         const SystemFacts& facts) const {
  Scan s(impl_->rules.size());
  LineReader reader(log, body_offset);
  std::string line;
  bool line_ended = true, ended = true;
  while (reader.next(line, ended)) {
    if (line_ended) ++s.lines;
    impl_->scan_line(line, s.lines, s);
    line_ended = ended;
  }
  return impl_->decide(s, facts);
}

}  // namespace meganeura::alert
