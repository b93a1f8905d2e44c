// One gpualert job from start to end: record, supervise, classify, report, notify.
//
// The outcome is never changed by what happens after the child ends: notification runs in
// a separate sender process under a hard deadline, and every message passes through the
// on-disk outbox first. run_job returns the child's shell-style exit status, or 125 when
// the job could not be recorded and therefore was not started.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "alert/config.h"

namespace meganeura::alert {

inline constexpr int kExitCannotStart = 125;

struct RunOptions {
  std::vector<std::string> argv;
  Config config{};
  std::optional<std::filesystem::path> config_path;  // handed to the sender process
  std::optional<double> timeout_s;
  std::optional<double> hang_after_s;
  bool kill_on_hang = false;
  bool notify = true;
  bool dry_run = false;  // print the messages instead of sending them
  bool echo = true;      // show the child's output on our stdout
  bool summary = true;   // one line on stderr at the end
  bool telemetry = true;
  std::optional<std::filesystem::path> json_report;
  std::string sender_exe;      // the gpualert-send program
  std::string gpu_helper_exe;  // the gpualert-gpu program (GPU telemetry)
};

int run_job(const RunOptions& options);

// Runs the sender on the outbox (new entries `first`) and waits at most `deadline_s`,
// killing it after that. Returns a one-line description of what happened.
std::string deliver_with_deadline(const std::string& sender_exe, const std::filesystem::path& state_dir,
                                  const std::optional<std::filesystem::path>& config_path,
                                  const std::vector<std::string>& first, double deadline_s, bool wait,
                                  long* spawned_pid = nullptr);

}  // namespace meganeura::alert
