// Corpus evaluation: every labelled log is replayed by a real child under the supervisor
// (pseudo-terminal, log store, exit status or signal as recorded) and classified exactly
// as a live job would be. Reports per-class precision, recall and F1, and macro-F1.
//
// labels.tsv: file <TAB> class <TAB> status <TAB> facts <TAB> split, where status is
// "exit:N" or "signal:NAME", facts is "-" or a comma list of recorded system evidence
// ("oom_kill", "xid:79", "ecc"), split names the part of the corpus the log belongs to
// ("train"/"heldout" in-house, "public", "tune"/"heldout" in the field corpus). Lines
// starting with '#' are comments. An optional sixth column names where the log came from;
// it is required for the split "public" and, with `require_source`, for every log (failure
// output as people posted it in public bug reports).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace meganeura::alert {

struct LabelledLog {
  std::string file;
  std::string expected;
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::vector<std::string> facts;
  std::string split;
  std::string source;
};

struct ClassScore {
  int tp = 0, fp = 0, fn = 0;
  double precision() const { return tp + fp ? double(tp) / (tp + fp) : 0; }
  double recall() const { return tp + fn ? double(tp) / (tp + fn) : 0; }
  double f1() const {
    double p = precision(), r = recall();
    return p + r > 0 ? 2 * p * r / (p + r) : 0;
  }
};

struct EvalResult {
  std::map<std::string, ClassScore> per_class;
  double macro_f1 = 0;
  size_t total = 0;
  size_t correct = 0;
  std::vector<std::string> mistakes;  // "file: expected X, got Y"
  size_t status_exact = 0;            // replays whose wrapper exit status was the recorded one
  std::vector<std::string> status_mismatches;
  std::map<std::string, std::map<std::string, int>> confusion;  // expected -> predicted -> count
  double accuracy() const { return total ? double(correct) / double(total) : 0; }
};

std::vector<LabelledLog> read_labels(const std::filesystem::path& labels_file, bool require_source = false);

// `self_exe` is the gpualert program (its hidden `replay` command is the child).
// `split` selects one split ("train", "heldout", "tune", ...) or "" for all.
EvalResult evaluate_corpus(const std::filesystem::path& corpus_dir, const std::string& self_exe,
                           const std::string& split, bool require_source = false);

// Per-class scores, the confusion matrix (rows: expected class, columns: predicted), the
// summary line and the mistakes.
std::string format_eval(const EvalResult& result);

// The replay child: writes the log to stdout in uneven chunks, then ends as recorded.
[[noreturn]] void replay_log(const std::filesystem::path& log, std::optional<int> exit_code, std::optional<int> signal);

}  // namespace meganeura::alert
