// Failure classification: one ordered rule table (rules.cpp) over the exit status, the
// signal, the child's whole output (never gpualert's header or the command line) and the
// system's own evidence (cgroup OOM kills, kernel OOM reports, NVML Xid/ECC events).
//
// The first rule that matches wins, so specific causes (a CUDA OOM that surfaces as a
// RuntimeError) sit above generic ones. All patterns run in one linear-time RE2 set pass
// over the log, so a multi-gigabyte log costs one read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meganeura::alert {

// A line of output longer than this is scanned in pieces of this size (with the same line
// number), so a log of one endless line (progress bars redrawn with '\r') takes bounded memory.
// A pattern split across two pieces is not seen.
inline constexpr size_t kMaxLogLineBytes = size_t(1) << 20;

struct Evidence {
  uint64_t line = 0;  // 1-based line of the child's output; 0 for evidence from elsewhere
  std::string text;
};

// What is known besides the log.
struct SystemFacts {
  std::optional<int> exit_code;
  std::optional<int> signal;           // the child died by this signal
  bool terminated_by_request = false;  // the wrapper got SIGTERM/SIGHUP, or --timeout fired
  bool hang_killed = false;
  uint64_t cgroup_oom_kills = 0;        // increase of memory.events oom_kill during the job
  std::vector<std::string> kernel_oom;  // kernel log lines about killing one of our processes
  std::vector<std::string> gpu_events;  // "Xid 79 on GPU 0", "double-bit ECC error on GPU 1"
};

struct Classification {
  std::string id;      // class id, e.g. "cuda_oom"
  std::string label;   // human-readable, e.g. "CUDA out of memory"
  std::string remedy;  // one line
  double confidence = 0;
  std::vector<Evidence> evidence;
};

struct ClassInfo {
  std::string_view id;
  std::string_view label;
};

class Classifier {
 public:
  Classifier();  // the rule set is compiled on first use
  // Compiles the rule set now; throws std::logic_error naming a rule whose pattern is invalid.
  void check_rules() const;
  ~Classifier();
  Classifier(const Classifier&) = delete;
  Classifier& operator=(const Classifier&) = delete;

  // Classifies the file's content from `body_offset` (see find_body_offset). A ".gz"
  // file is read through zlib.
  Classification classify_file(const std::filesystem::path& log, uint64_t body_offset, const SystemFacts& facts) const;
  Classification classify_text(std::string_view body, const SystemFacts& facts) const;

  // Every class id, in rule order.
  static std::vector<ClassInfo> classes();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace meganeura::alert
