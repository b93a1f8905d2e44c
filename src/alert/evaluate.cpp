#include "alert/evaluate.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "alert/classifier.h"
#include "alert/log_store.h"
#include "alert/supervisor.h"
#include "alert/util.h"

namespace meganeura::alert {

namespace {

std::vector<std::string> split_columns(const std::string& line, char sep) {
  std::vector<std::string> cols;
  std::stringstream ss(line);
  std::string col;
  while (std::getline(ss, col, sep)) cols.push_back(col);
  return cols;
}

// One labels.tsv row; `where` is "file:line" for the messages.
LabelledLog parse_label(const std::vector<std::string>& cols, const std::string& where, bool require_source) {
  static const auto known = Classifier::classes();
  LabelledLog l;
  l.file = cols[0];
  l.expected = cols[1];
  if (std::none_of(known.begin(), known.end(), [&](const auto& c) { return c.id == l.expected; }))
    throw std::runtime_error(fmt::format("[gpualert] {}: unknown class '{}'", where, l.expected));
  if (cols[2].rfind("exit:", 0) == 0)
    l.exit_code = std::stoi(cols[2].substr(5));
  else if (cols[2].rfind("signal:", 0) == 0)
    l.signal = parse_signal(cols[2].substr(7));
  else
    throw std::runtime_error(fmt::format("[gpualert] {}: status must be exit:N or signal:NAME", where));
  if (cols[3] != "-") l.facts = split_columns(cols[3], ',');
  l.split = cols[4];
  if (cols.size() == 6) l.source = cols[5];
  if ((l.split == "public" || require_source) && l.source.empty())
    throw std::runtime_error(fmt::format("[gpualert] {}: a public log needs its source in a sixth column", where));
  return l;
}

}  // namespace

std::vector<LabelledLog> read_labels(const std::filesystem::path& labels_file, bool require_source) {
  std::ifstream in(labels_file);
  if (!in) throw std::runtime_error(fmt::format("[gpualert] cannot read labels '{}'", labels_file.string()));
  std::vector<LabelledLog> out;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    const std::string where = fmt::format("{}:{}", labels_file.string(), number);
    auto cols = split_columns(line, '\t');
    if (cols.size() != 5 && cols.size() != 6)
      throw std::runtime_error(
          fmt::format("[gpualert] {}: expected 5 or 6 tab-separated columns, got {}", where, cols.size()));
    out.push_back(parse_label(cols, where, require_source));
  }
  return out;
}

[[noreturn]] void replay_log(const std::filesystem::path& log, std::optional<int> exit_code,
                             std::optional<int> signal) {
  gzFile f = gzopen(log.c_str(), "rb");
  if (f == nullptr) {
    fmt::print(stderr, "gpualert replay: cannot read '{}'\n", log.string());
    _exit(2);
  }
  // Uneven chunk sizes split lines and escape sequences the way real output arrives.
  static char buf[8192];
  unsigned seed = 12345;
  for (;;) {
    seed = seed * 1103515245 + 12345;
    unsigned want = 1 + (seed >> 8) % sizeof buf;
    int n = gzread(f, buf, want);
    if (n <= 0) break;
    for (int done = 0; done < n;) {
      ssize_t w = write(STDOUT_FILENO, buf + done, static_cast<size_t>(n - done));
      if (w < 0) {
        if (errno == EINTR) continue;
        _exit(2);
      }
      done += static_cast<int>(w);
    }
  }
  gzclose(f);
  if (signal) {
    struct rlimit no_core {
      0, 0
    };
    setrlimit(RLIMIT_CORE, &no_core);
    std::signal(*signal, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, *signal);
    sigprocmask(SIG_UNBLOCK, &set, nullptr);
    raise(*signal);
  }
  _exit(exit_code.value_or(0));
}

namespace {

// The system evidence recorded with a log, as the live wrapper would have seen it.
SystemFacts recorded_facts(const LabelledLog& l, const ChildOutcome& outcome) {
  SystemFacts facts;
  facts.exit_code = outcome.exit_code;
  facts.signal = outcome.term_signal;
  for (const auto& f : l.facts) {
    if (f == "oom_kill")
      facts.cgroup_oom_kills = 1;
    else if (f.rfind("xid:", 0) == 0)
      facts.gpu_events.push_back("Xid " + f.substr(4) + " on GPU 0");
    else if (f == "ecc")
      facts.gpu_events.push_back("double-bit ECC error on GPU 0");
    else if (f == "terminated")
      facts.terminated_by_request = true;
    else if (f == "hang_killed")
      facts.hang_killed = true;
    else
      throw std::runtime_error(fmt::format("[gpualert] eval: unknown fact '{}' for {}", f, l.file));
  }
  return facts;
}

struct Replayed {
  Classification classification;
  int exit_status = 0;  // the wrapper's, as a shell reports it
};

// Replays one log under the supervisor (its own child, pseudo-terminal and log store in
// `dir`) and classifies the recorded log as a live job would be.
Replayed replay_and_classify(const LabelledLog& l, const std::filesystem::path& corpus_dir, const std::string& self_exe,
                             const std::filesystem::path& dir, const Classifier& classifier) {
  const auto path = corpus_dir / l.file;
  if (!std::filesystem::exists(path))
    throw std::runtime_error(fmt::format("[gpualert] eval: missing log '{}'", path.string()));
  SupervisorOptions so;
  so.argv = {self_exe, "replay", path.string()};
  if (l.signal)
    so.argv.insert(so.argv.end(), {"--signal", signal_name(*l.signal)});
  else
    so.argv.insert(so.argv.end(), {"--exit-status", std::to_string(l.exit_code.value_or(0))});
  so.echo = false;
  LogStore log(dir, {l.file, join_command(so.argv), "eval", corpus_dir.string(), ""});
  const ChildOutcome outcome = supervise(so, log);
  log.finish();
  return {classifier.classify_file(log.path(), log.body_offset(), recorded_facts(l, outcome)), outcome.exit_status};
}

void score(EvalResult& result, const LabelledLog& l, const Replayed& replayed) {
  const Classification& c = replayed.classification;
  ++result.total;
  const int recorded = l.signal ? 128 + *l.signal : l.exit_code.value_or(0);
  if (replayed.exit_status == recorded)
    ++result.status_exact;
  else
    result.status_mismatches.push_back(
        fmt::format("{}: exit status {}, recorded {}", l.file, replayed.exit_status, recorded));
  ++result.confusion[l.expected][c.id];
  if (c.id == l.expected) {
    ++result.correct;
    ++result.per_class[l.expected].tp;
    return;
  }
  ++result.per_class[l.expected].fn;
  ++result.per_class[c.id].fp;
  std::string ev = c.evidence.empty() ? "" : c.evidence.front().text;
  result.mistakes.push_back(fmt::format("{}: expected {}, got {} ({})", l.file, l.expected, c.id, printable(ev, 120)));
}

}  // namespace

EvalResult evaluate_corpus(const std::filesystem::path& corpus_dir, const std::string& self_exe,
                           const std::string& split, bool require_source) {
  auto labels = read_labels(corpus_dir / "labels.tsv", require_source);
  char tmpl[] = "/tmp/gpualert-eval-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("[gpualert] eval: cannot create a temporary directory");
  const std::filesystem::path tmp = tmpl;
  Classifier classifier;
  EvalResult result;
  int index = 0;
  for (const auto& l : labels) {
    if (!split.empty() && l.split != split) continue;
    const auto dir = tmp / std::to_string(index++);
    score(result, l, replay_and_classify(l, corpus_dir, self_exe, dir, classifier));
    std::filesystem::remove_all(dir);
  }
  std::filesystem::remove_all(tmp);
  double sum = 0;
  for (const auto& [id, s] : result.per_class) sum += s.f1();
  result.macro_f1 = result.per_class.empty() ? 0 : sum / static_cast<double>(result.per_class.size());
  return result;
}

std::string format_eval(const EvalResult& r) {
  std::string s = fmt::format("{:<16} {:>5} {:>5} {:>5} {:>9} {:>7} {:>6}\n", "class", "tp", "fp", "fn", "precision",
                              "recall", "f1");
  for (const auto& [id, c] : r.per_class)
    s += fmt::format("{:<16} {:>5} {:>5} {:>5} {:>9.3f} {:>7.3f} {:>6.3f}\n", id, c.tp, c.fp, c.fn, c.precision(),
                     c.recall(), c.f1());
  // Columns: every class that was expected or predicted, abbreviated to fit.
  std::vector<std::string> cols;
  for (const auto& [id, c] : r.per_class) cols.push_back(id);
  s += fmt::format("confusion (rows expected, columns predicted)\n{:<16}", "");
  for (const auto& c : cols) s += fmt::format(" {:>5}", c.substr(0, 5));
  s += "\n";
  for (const auto& [expected, row] : r.confusion) {
    s += fmt::format("{:<16}", expected);
    for (const auto& c : cols) {
      auto it = row.find(c);
      s += it == row.end() ? fmt::format(" {:>5}", ".") : fmt::format(" {:>5}", it->second);
    }
    s += "\n";
  }
  s += fmt::format("logs {}  correct {}  accuracy {:.4f}  classes {}  macro-F1 {:.4f}\n", r.total, r.correct,
                   r.accuracy(), r.per_class.size(), r.macro_f1);
  for (const auto& m : r.mistakes) s += "mistake: " + m + "\n";
  s += fmt::format("exit statuses through the wrapper: {} of {} as recorded\n", r.status_exact, r.total);
  for (const auto& m : r.status_mismatches) s += "status mismatch: " + m + "\n";
  return s;
}

}  // namespace meganeura::alert
