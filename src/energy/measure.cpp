#include "energy/measure.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/process.h"

namespace meganeura::energy {
namespace {

std::atomic<pid_t> g_child{0};

// A Ctrl-C at the terminal reaches the whole foreground process group, the command included,
// with si_code SI_KERNEL: forwarding it would deliver it twice. Only signals sent to us alone
// (kill, si_code SI_USER/SI_QUEUE) are forwarded.
void forward(int sig, siginfo_t* info, void*) {
  const pid_t child = g_child.load();
  if (child > 0 && (info == nullptr || info->si_code != SI_KERNEL)) kill(child, sig);
}

}  // namespace

MeasureResult measure_command(const std::vector<std::string>& argv, const MeterOptions& options) {
  if (argv.empty()) throw std::invalid_argument("[energy] measure: no command given (use -- CMD ...)");

  MeasureResult result;
  EnergyMeter meter(options);
  meter.start();
  // posix_spawn (common::spawn), not fork: the meter threads are running, and a forked child of
  // a threaded process may only call async-signal-safe functions. SIGINT/SIGTERM are blocked
  // around the spawn so that none arrives before the child's pid is known; the child gets
  // default handlers and an empty mask.
  struct sigaction sa {
  }, old_int{}, old_term{};
  sa.sa_sigaction = forward;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigset_t block, old_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  pid_t pid = 0;
  const int spawn_err = common::spawn({.argv = argv, .search_path = true}, &pid);
  if (spawn_err == 0) g_child = pid;
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);

  int status = 0;
  if (spawn_err == 0) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  g_child = 0;
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  result.reading = meter.stop();

  if (spawn_err != 0) {
    result.failure = "cannot run '" + argv[0] + "': " + std::strerror(spawn_err);
    result.exit_code = spawn_err == ENOENT ? 127 : 126;
    return result;
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_code = 128 + WTERMSIG(status);
  }
  return result;
}

}  // namespace meganeura::energy
