// Runs one command under a pseudo-terminal in its own session and process group, and
// reports exactly how it ended.
//
// A pseudo-terminal makes the child (Python, most C runtimes) line-buffer its output, so
// the last line before a crash reaches the log, and stdout and stderr keep their order.
// Signals sent to the wrapper (INT, TERM, HUP, QUIT, USR1, USR2) go to the child's whole
// process group. After SIGTERM, SIGHUP, a timeout or a hang kill, the group gets `grace_s`
// seconds before SIGKILL; grandchildren left behind after such an ending are killed too.
// Job control works as for the command itself: Ctrl-Z or SIGTSTP stops the job (with
// SIGSTOP: a session of its own drops terminal stop signals) and then the wrapper, SIGCONT
// continues both; started in the background, the wrapper leaves the terminal alone.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "alert/log_store.h"

namespace meganeura::alert {

struct SupervisorOptions {
  std::vector<std::string> argv{};
  std::optional<double> timeout_s{};
  double grace_s = 30;
  std::optional<double> hang_after_s{};
  bool kill_on_hang = false;
  bool echo = true;  // copy the child's output to our stdout as it arrives
  // Environment variables the child must not see (gpualert's own secrets).
  std::vector<std::string> env_remove{};
  double sync_interval_s = 2;
  // Extra hang condition (GPU utilisation near zero); absent means "no GPU evidence".
  std::function<bool()> gpus_idle{};
  // Called from the supervision loop when a hang is detected; must not block.
  std::function<void(double silent_s)> on_hang{};
  // Called from the supervision loop roughly every 200 ms (reaping helpers, etc.).
  std::function<void()> on_tick{};
  // Called once the child runs (with its pid, which is also its session and process group
  // id), before the first wait: work placed here (starting samplers, compiling the rules)
  // overlaps the child's own start-up.
  std::function<void(long child_pid)> on_started{};
};

struct ChildOutcome {
  int exit_status = 0;                 // what a shell reports: code, or 128 + signal
  std::optional<int> exit_code;        // normal exit
  std::optional<int> term_signal;      // death by signal
  std::optional<int> received_signal;  // last terminating signal the wrapper received
  bool timed_out = false;
  bool hang_detected = false;
  bool hang_killed = false;
  bool killed_after_grace = false;
  double start_time = 0;  // wall clock
  double end_time = 0;
  long child_pid = 0;
};

// Throws std::runtime_error when the pseudo-terminal or the process cannot be created.
// A command that cannot be executed ends with status 127 (not found) or 126 (not
// executable), with the reason written to its output, as a shell does.
ChildOutcome supervise(const SupervisorOptions& options, LogStore& log);

}  // namespace meganeura::alert
