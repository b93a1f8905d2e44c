#include "alert/supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include "alert/util.h"

extern char** environ;

namespace meganeura::alert {
namespace {

constexpr std::array kForwarded{SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
int g_signal_pipe[2] = {-1, -1};

extern "C" void on_signal(int sig) {
  int saved = errno;
  auto byte = static_cast<unsigned char>(sig);
  // A full pipe only loses duplicates of signals already queued.
  [[maybe_unused]] auto n = write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

double mono_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void set_nonblocking_cloexec(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

void write_fully(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        poll(&p, 1, 100);
        continue;
      }
      throw std::runtime_error(std::strerror(errno));
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// True when our process group owns the terminal on `fd` (a shell's foreground job).
bool in_foreground(int fd) { return tcgetpgrp(fd) == getpgrp(); }

// Puts the user's terminal in a raw-input mode so keystrokes (including Ctrl-C) go to the
// child's pseudo-terminal, which applies the line discipline itself. Output processing is
// kept so that our own newlines still return the carriage. The suspend key (Ctrl-Z) still
// signals us: the job's process group lives in a session of its own, where the kernel
// drops a terminal's stop signals, so we stop the job and ourselves as a shell expects.
// Only a foreground process may change the terminal (a background one would be stopped
// by SIGTTOU), so a job started with '&' leaves it alone.
class RawTerminal {
 public:
  explicit RawTerminal(int fd) : fd_(fd) {
    if (tcgetattr(fd_, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_iflag &= ~static_cast<tcflag_t>(IGNBRK | BRKINT | PARMRK | ISTRIP | INLCR | IGNCR | ICRNL | IXON);
    raw.c_lflag &= ~static_cast<tcflag_t>(ECHO | ECHONL | ICANON | IEXTEN);
    raw.c_cc[VINTR] = _POSIX_VDISABLE;
    raw.c_cc[VQUIT] = _POSIX_VDISABLE;
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    active_ = tcsetattr(fd_, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_ && in_foreground(fd_)) tcsetattr(fd_, TCSANOW, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  int fd_;
  termios saved_{};
  bool active_ = false;
};

struct SignalGuard {
  std::array<struct sigaction, kForwarded.size() + 5> saved{};
  SignalGuard() {
    if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
      throw std::runtime_error(fmt::format("[gpualert] pipe: {}", std::strerror(errno)));
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    size_t i = 0;
    for (int s : kForwarded) sigaction(s, &sa, &saved[i++]);
    sigaction(SIGCHLD, &sa, &saved[i++]);
    sigaction(SIGWINCH, &sa, &saved[i++]);
    sigaction(SIGTSTP, &sa, &saved[i++]);
    sigaction(SIGCONT, &sa, &saved[i++]);
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &saved[i++]);
  }
  ~SignalGuard() {
    size_t i = 0;
    for (int s : kForwarded) sigaction(s, &saved[i++], nullptr);
    sigaction(SIGCHLD, &saved[i++], nullptr);
    sigaction(SIGWINCH, &saved[i++], nullptr);
    sigaction(SIGTSTP, &saved[i++], nullptr);
    sigaction(SIGCONT, &saved[i++], nullptr);
    sigaction(SIGPIPE, &saved[i++], nullptr);
    close(g_signal_pipe[0]);
    close(g_signal_pipe[1]);
    g_signal_pipe[0] = g_signal_pipe[1] = -1;
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;
};

struct SpawnArgs {
  const char* slave_name;
  bool stdin_is_tty;
  char* const* argv;
  char* const* envp;
  pid_t parent;
  int error;  // written by the child when exec fails (the memory is shared)
};

// Runs in the new process, on its own stack, sharing our memory until exec (vfork
// semantics): only system calls here, no allocation. Not instrumented by AddressSanitizer:
// its frames would poison the shadow of a stack that is unmapped at exec without unwinding,
// and the next job's stack, mapped at the same address, would start out poisoned.
extern "C" __attribute__((no_sanitize("address"))) int child_main(void* raw) {
  auto* a = static_cast<SpawnArgs*>(raw);
  // The job ends with its monitor: a SIGKILLed wrapper must not leave it running unobserved.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != a->parent) _exit(127);  // the monitor died before the line above
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s : kForwarded) sigaction(s, &dfl, nullptr);
  for (int s : {SIGCHLD, SIGWINCH, SIGPIPE, SIGTSTP, SIGCONT, SIGTTIN, SIGTTOU, SIGXFSZ}) sigaction(s, &dfl, nullptr);
  // A session leader that opens a terminal makes it its controlling terminal.
  if (setsid() < 0) {
    a->error = errno;
    _exit(127);
  }
  int fd = open(a->slave_name, O_RDWR);
  if (fd < 0) {
    a->error = errno;
    _exit(127);
  }
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
  if (a->stdin_is_tty) dup2(fd, STDIN_FILENO);
  if (fd > STDERR_FILENO) close(fd);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execvpe(a->argv[0], a->argv, a->envp);
  a->error = errno;
  _exit(127);
}

// Starts the child with clone(CLONE_VM | CLONE_VFORK), as posix_spawn does (no page-table
// copy, which matters on virtual machines where every page fault is expensive), but with
// room to set the parent-death signal. Returns 0 or the errno of the failed start.
int spawn_child(const char* slave_name, bool stdin_is_tty, const std::vector<char*>& argv,
                const std::vector<std::string>& env_remove, pid_t* pid) {
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry = *e;
    bool drop = false;
    for (const auto& name : env_remove)
      drop |= entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 && entry[name.size()] == '=';
    if (!drop) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  SpawnArgs args{slave_name, stdin_is_tty, argv.data(), envp.data(), getpid(), 0};
  constexpr size_t kStack = 64 * 1024;
  void* stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return errno;
  // No handler of ours may run in the child before exec.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t p = clone(child_main, static_cast<char*>(stack) + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  munmap(stack, kStack);
  if (p < 0) return clone_errno;
  if (args.error != 0) {
    waitpid(p, nullptr, 0);
    return args.error;
  }
  *pid = p;
  return 0;
}

bool echo_allowed(const SupervisorOptions& o) { return o.echo; }

}  // namespace

ChildOutcome supervise(const SupervisorOptions& options, LogStore& log) {
  if (options.argv.empty()) throw std::invalid_argument("[gpualert] no command given");
  ChildOutcome out;
  const bool stdin_is_tty = isatty(STDIN_FILENO) == 1;

  termios tio{};
  winsize ws{};
  termios* tio_ptr = nullptr;
  winsize* ws_ptr = nullptr;
  if (stdin_is_tty && tcgetattr(STDIN_FILENO, &tio) == 0) tio_ptr = &tio;
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 || ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0) ws_ptr = &ws;
  int master = -1, slave = -1;
  if (openpty(&master, &slave, nullptr, tio_ptr, ws_ptr) != 0)
    throw std::runtime_error(fmt::format("[gpualert] cannot open a pseudo-terminal: {}", std::strerror(errno)));
  // No output post-processing: the child's "\n" stays "\n" in the log and the terminal.
  termios slave_tio{};
  if (tcgetattr(slave, &slave_tio) == 0) {
    slave_tio.c_oflag &= ~static_cast<tcflag_t>(OPOST);
    if (!stdin_is_tty) slave_tio.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    tcsetattr(slave, TCSANOW, &slave_tio);
  }

  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  SignalGuard guard;
  // Started in the background ('&'), we neither touch the terminal nor read from it (that
  // would stop us with SIGTTOU/SIGTTIN) until a shell brings us to the foreground.
  bool foreground = stdin_is_tty && in_foreground(STDIN_FILENO);
  std::optional<RawTerminal> raw;
  if (foreground) raw.emplace(STDIN_FILENO);

  set_nonblocking_cloexec(master);
  fcntl(slave, F_SETFD, FD_CLOEXEC);
  char slave_name[256] = {};
  if (ttyname_r(slave, slave_name, sizeof slave_name) != 0) {
    close(master);
    close(slave);
    throw std::runtime_error("[gpualert] cannot name the pseudo-terminal");
  }
  out.start_time = wall_now();
  const double t0 = mono_now();
  pid_t pid = 0;
  int spawn_error = spawn_child(slave_name, stdin_is_tty, argv, options.env_remove, &pid);
  close(slave);
  if (spawn_error != 0) {
    // Same wording and statuses as a shell, so the outcome reads the same.
    std::string msg = fmt::format("gpualert: {}: {}\n", options.argv[0], std::strerror(spawn_error));
    log.append(msg);
    if (echo_allowed(options)) [[maybe_unused]]
      auto n = write(STDERR_FILENO, msg.data(), msg.size());
    close(master);
    log.finish();
    out.exit_code = spawn_error == ENOENT ? 127 : 126;
    out.exit_status = *out.exit_code;
    out.end_time = wall_now();
    return out;
  }
  out.child_pid = pid;
  if (options.on_started) options.on_started(pid);

  bool echo = options.echo;
  bool stdin_open = stdin_is_tty;
  bool child_done = false;
  bool master_open = true;
  double last_output = t0;
  double last_sync = t0;
  double last_tick = t0;
  std::optional<double> kill_at;  // when the group gets SIGKILL
  bool ending_forced = false;     // timeout, hang kill, SIGTERM/SIGHUP: clean up the group
  std::array<char, 65536> buf;    // not zeroed: 16 fewer page faults at start-up; reads fill it

  auto begin_termination = [&](int sig) {
    kill(-pid, sig);
    ending_forced = true;
    if (!kill_at) kill_at = mono_now() + options.grace_s;
  };
  auto drain_master = [&]() {
    while (master_open) {
      ssize_t n = read(master, buf.data(), buf.size());
      if (n > 0) {
        log.append({buf.data(), static_cast<size_t>(n)});
        if (echo) {
          try {
            write_fully(STDOUT_FILENO, buf.data(), static_cast<size_t>(n));
          } catch (const std::exception&) {
            echo = false;  // our stdout went away; keep recording
          }
        }
        last_output = mono_now();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      master_open = false;  // EIO: every writer closed the terminal
    }
  };

  int status = 0;
  auto record_end = [&] {
    child_done = true;
    // Everything the child wrote before exiting is already in the terminal buffer.
    drain_master();
    if (WIFEXITED(status)) {
      out.exit_code = WEXITSTATUS(status);
      out.exit_status = *out.exit_code;
    } else if (WIFSIGNALED(status)) {
      out.term_signal = WTERMSIG(status);
      out.exit_status = 128 + *out.term_signal;
    }
  };
  // Job control as a shell sees it: SIGCONT (fg, bg, kill -CONT) continues the job; back
  // in the foreground the terminal is raw again and our input flows to the job.
  auto continue_job = [&] {
    foreground = stdin_is_tty && in_foreground(STDIN_FILENO);
    if (foreground && !raw) raw.emplace(STDIN_FILENO);
    kill(-pid, SIGCONT);
    last_output = mono_now();  // time spent stopped is not silence
  };
  // Ctrl-Z or SIGTSTP: the job stops (SIGSTOP, which its own session cannot drop), the
  // terminal gets its settings back, and we stop until continued. `stop_job` is false when
  // the job already stopped by itself. We do not wait for the job's stop: a shell in the
  // middle of vfork() stops only once its child has, which may be after we continue it.
  bool own_stop_unreported = false;  // the job's report of our SIGSTOP is still to come
  auto suspend = [&](bool stop_job) {
    if (stop_job) {
      kill(-pid, SIGSTOP);
      own_stop_unreported = true;
    }
    drain_master();
    raw.reset();
    kill(getpid(), SIGSTOP);
    continue_job();
  };

  bool hang_reported = false;
  std::string pending_input;  // read from our stdin, not yet accepted by the job's terminal
  while (!child_done) {
    double now = mono_now();
    double wait_s = 0.2;
    if (options.timeout_s && !out.timed_out) wait_s = std::min(wait_s, std::max(0.0, t0 + *options.timeout_s - now));
    if (kill_at) wait_s = std::min(wait_s, std::max(0.0, *kill_at - now));
    std::array<pollfd, 3> fds{};
    nfds_t nfds = 0;
    fds[nfds++] = {g_signal_pipe[0], POLLIN, 0};
    int master_slot = -1, stdin_slot = -1;
    if (master_open) {
      master_slot = static_cast<int>(nfds);
      // Keystrokes the job has not taken yet wait here; the loop never blocks on them.
      short events = POLLIN;
      if (!pending_input.empty()) events = static_cast<short>(events | POLLOUT);
      fds[nfds++] = {master, events, 0};
    }
    if (stdin_open && foreground && pending_input.empty()) {
      stdin_slot = static_cast<int>(nfds);
      fds[nfds++] = {STDIN_FILENO, POLLIN, 0};
    }
    int rc = poll(fds.data(), nfds, static_cast<int>(wait_s * 1000) + 1);
    if (rc < 0 && errno != EINTR) throw std::runtime_error(fmt::format("[gpualert] poll: {}", std::strerror(errno)));

    if (master_slot >= 0 && (fds[master_slot].revents & ~POLLOUT) != 0) {
      drain_master();
      hang_reported = false;
    }
    if (stdin_slot >= 0 && fds[stdin_slot].revents != 0) {
      ssize_t n = read(STDIN_FILENO, buf.data(), buf.size());
      if (n > 0) {
        pending_input.assign(buf.data(), static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        stdin_open = false;
      }
    }
    // A job that does not read its input fills the terminal's input queue; what does not
    // fit stays pending (and stdin unread) instead of stalling output, timeouts and signals.
    if (!pending_input.empty() && master_open) {
      ssize_t n = write(master, pending_input.data(), pending_input.size());
      if (n > 0) {
        pending_input.erase(0, static_cast<size_t>(n));
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        pending_input.clear();
        stdin_open = false;
      }
    }
    if (fds[0].revents != 0) {
      unsigned char sigs[64];
      ssize_t n = read(g_signal_pipe[0], sigs, sizeof sigs);
      for (ssize_t i = 0; i < n; ++i) {
        int sig = sigs[i];
        if (sig == SIGCHLD) continue;  // handled by waitpid below
        if (sig == SIGTSTP) {
          suspend(true);
          continue;
        }
        if (sig == SIGCONT) {
          continue_job();
          continue;
        }
        if (sig == SIGWINCH) {
          winsize w{};
          if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0) ioctl(master, TIOCSWINSZ, &w);
          continue;
        }
        if (sig == SIGTERM || sig == SIGHUP) {
          out.received_signal = sig;
          begin_termination(sig);
        } else {
          if (sig == SIGINT || sig == SIGQUIT) out.received_signal = sig;
          kill(-pid, sig);
        }
      }
    }

    if (child_done) break;
    pid_t r = waitpid(pid, &status, WNOHANG | WUNTRACED);
    if (r == pid && WIFSTOPPED(status)) {
      if (own_stop_unreported) {
        // The stop we asked for, reported late: we already run again, so must the job.
        own_stop_unreported = false;
        kill(-pid, SIGCONT);
      } else {
        suspend(false);  // stopped from elsewhere: we stop with it, as its shell would
      }
    } else if (r == pid) {
      record_end();
      break;
    }

    now = mono_now();
    if (options.timeout_s && !out.timed_out && now - t0 >= *options.timeout_s) {
      out.timed_out = true;
      begin_termination(SIGTERM);
    }
    if (kill_at && now >= *kill_at && !out.killed_after_grace) {
      out.killed_after_grace = true;
      kill(-pid, SIGKILL);
    }
    if (options.hang_after_s && !hang_reported && now - last_output >= *options.hang_after_s &&
        (!options.gpus_idle || options.gpus_idle())) {
      hang_reported = true;
      out.hang_detected = true;
      if (options.on_hang) options.on_hang(now - last_output);
      if (options.kill_on_hang && !ending_forced) {
        out.hang_killed = true;
        begin_termination(SIGTERM);
      }
    }
    if (now - last_sync >= options.sync_interval_s) {
      log.sync();
      last_sync = now;
    }
    if (options.on_tick && now - last_tick >= 0.2) {
      options.on_tick();
      last_tick = now;
    }
  }

  // After a forced ending nothing of the job may outlive it, including grandchildren that
  // ignored SIGTERM or escaped the direct child's death.
  if (ending_forced) kill(-pid, SIGKILL);
  close(master);
  log.finish();
  out.end_time = wall_now();
  return out;
}

}  // namespace meganeura::alert
