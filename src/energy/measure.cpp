#include "energy/measure.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace meganeura::energy {
namespace {

std::atomic<pid_t> g_child{0};

void forward(int sig) {
  const pid_t child = g_child.load();
  if (child > 0) kill(child, sig);
}

}  // namespace

MeasureResult measure_command(const std::vector<std::string>& argv, const MeterOptions& options) {
  if (argv.empty()) throw std::invalid_argument("[energy] measure: no command given (use -- CMD ...)");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  // The child reports an exec failure through a close-on-exec pipe: EOF means it started.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("[energy] pipe: ") + std::strerror(errno));

  MeasureResult result;
  EnergyMeter meter(options);
  meter.start();
  // Installed before fork so that no signal can kill us while the child lives unwatched; exec
  // restores the defaults in the child.
  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_handler = forward;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    meter.stop();
    throw std::runtime_error(std::string("[energy] fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    close(fds[0]);
    execvp(args[0], args.data());
    const int err = errno;
    (void)!write(fds[1], &err, sizeof err);
    _exit(err == ENOENT ? 127 : 126);
  }
  close(fds[1]);
  g_child = pid;

  int exec_errno = 0;
  ssize_t got;
  do {
    got = read(fds[0], &exec_errno, sizeof exec_errno);
  } while (got < 0 && errno == EINTR);
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  result.reading = meter.stop();

  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    result.failure = "cannot run '" + argv[0] + "': " + std::strerror(exec_errno);
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_code = 128 + WTERMSIG(status);
  }
  return result;
}

}  // namespace meganeura::energy
