#include "alert/supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string_view>

#include "alert/util.h"
#include "common/process.h"

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

// The environment without the variables the job must not see.
std::vector<std::string> job_environment(const std::vector<std::string>& env_remove) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry = *e;
    bool drop = false;
    for (const auto& name : env_remove)
      drop |= entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 && entry[name.size()] == '=';
    if (!drop) out.emplace_back(entry);
  }
  return out;
}

// One supervised run: the pseudo-terminal, the child and the loop that serves them.
class Supervision {
 public:
  Supervision(const SupervisorOptions& options, LogStore& log)
      : o_(options), log_(log), stdin_is_tty_(isatty(STDIN_FILENO) == 1), echo_(options.echo) {}

  ChildOutcome run() {
    open_terminal();
    SignalGuard guard;
    // Started in the background ('&'), we neither touch the terminal nor read from it (that
    // would stop us with SIGTTOU/SIGTTIN) until a shell brings us to the foreground.
    foreground_ = stdin_is_tty_ && in_foreground(STDIN_FILENO);
    if (foreground_) raw_.emplace(STDIN_FILENO);
    if (!start_child()) return out_;
    if (o_.on_started) o_.on_started(pid_);
    while (!child_done_) step();
    // After a forced ending nothing of the job may outlive it, including grandchildren that
    // ignored SIGTERM or escaped the direct child's death.
    if (ending_forced_) kill(-pid_, SIGKILL);
    if (slave_ >= 0) close(slave_);
    close(master_);
    log_.finish();
    out_.end_time = wall_now();
    return out_;
  }

 private:
  // A pseudo-terminal with the user's settings and size, without output processing (the
  // child's "\n" stays "\n" in the log and the terminal).
  void open_terminal() {
    termios tio{};
    winsize ws{};
    termios* tio_ptr = nullptr;
    winsize* ws_ptr = nullptr;
    if (stdin_is_tty_ && tcgetattr(STDIN_FILENO, &tio) == 0) tio_ptr = &tio;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 || ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0) ws_ptr = &ws;
    if (openpty(&master_, &slave_, nullptr, tio_ptr, ws_ptr) != 0)
      throw std::runtime_error(fmt::format("[gpualert] cannot open a pseudo-terminal: {}", std::strerror(errno)));
    termios slave_tio{};
    if (tcgetattr(slave_, &slave_tio) == 0) {
      slave_tio.c_oflag &= ~static_cast<tcflag_t>(OPOST);
      if (!stdin_is_tty_) slave_tio.c_lflag &= ~static_cast<tcflag_t>(ECHO);
      tcsetattr(slave_, TCSANOW, &slave_tio);
    }
    set_nonblocking_cloexec(master_);
    fcntl(slave_, F_SETFD, FD_CLOEXEC);
    char name[256] = {};
    if (ttyname_r(slave_, name, sizeof name) != 0) {
      close(master_);
      close(slave_);
      throw std::runtime_error("[gpualert] cannot name the pseudo-terminal");
    }
    slave_name_ = name;
  }

  // The child leads a session of its own with the pseudo-terminal as its controlling
  // terminal, and dies with us: a SIGKILLed wrapper must not leave it running unobserved.
  // A command that cannot be executed ends as a shell reports it: 127 or 126, with the reason.
  bool start_child() {
    out_.start_time = wall_now();
    t0_ = last_output_ = last_sync_ = last_tick_ = mono_now();
    common::SpawnOptions so{.argv = o_.argv,
                            .search_path = true,
                            .env = job_environment(o_.env_remove),
                            .new_session = true,
                            .terminal = slave_name_,
                            .terminal_for_stdin = stdin_is_tty_,
                            .die_with_parent = true};
    const int spawn_error = common::spawn(so, &pid_);
    if (spawn_error == 0) {
      out_.child_pid = pid_;
      return true;
    }
    std::string msg = fmt::format("gpualert: {}: {}\n", o_.argv[0], std::strerror(spawn_error));
    log_.append(msg);
    if (o_.echo) [[maybe_unused]]
      auto n = write(STDERR_FILENO, msg.data(), msg.size());
    close(slave_);
    close(master_);
    log_.finish();
    out_.exit_code = spawn_error == ENOENT ? 127 : 126;
    out_.exit_status = *out_.exit_code;
    out_.end_time = wall_now();
    return false;
  }

  // One turn of the loop: wait for output, input or a signal (at most 200 ms, less when a
  // deadline is nearer), serve what came, then look at the child and the clocks.
  void step() {
    Polled p = wait_for_events();
    if (p.master >= 0 && (p.fds[p.master].revents & ~POLLOUT) != 0) {
      drain_master();
      hang_reported_ = false;
    }
    if (p.input >= 0 && p.fds[p.input].revents != 0) read_input();
    forward_input();
    if (p.fds[0].revents != 0) handle_signals();
    if (child_done_) return;
    check_child();
    if (child_done_) return;
    check_clocks(mono_now());
  }

  struct Polled {
    std::array<pollfd, 3> fds{};
    int master = -1, input = -1;  // slots in fds, -1 when not polled
  };

  Polled wait_for_events() {
    const double now = mono_now();
    double wait_s = 0.2;
    if (o_.timeout_s && !out_.timed_out) wait_s = std::min(wait_s, std::max(0.0, t0_ + *o_.timeout_s - now));
    if (kill_at_) wait_s = std::min(wait_s, std::max(0.0, *kill_at_ - now));
    Polled p;
    nfds_t n = 0;
    p.fds[n++] = {g_signal_pipe[0], POLLIN, 0};
    if (master_open_) {
      p.master = static_cast<int>(n);
      // Keystrokes the job has not taken yet wait here; the loop never blocks on them.
      const short events = pending_input_.empty() ? POLLIN : static_cast<short>(POLLIN | POLLOUT);
      p.fds[n++] = {master_, events, 0};
    }
    if (stdin_open_ && foreground_ && pending_input_.empty()) {
      p.input = static_cast<int>(n);
      p.fds[n++] = {STDIN_FILENO, POLLIN, 0};
    }
    const int rc = poll(p.fds.data(), n, static_cast<int>(wait_s * 1000) + 1);
    if (rc < 0 && errno != EINTR) throw std::runtime_error(fmt::format("[gpualert] poll: {}", std::strerror(errno)));
    return p;
  }

  void record(std::string_view bytes) {
    if (bytes.empty()) return;
    log_.append(bytes);
    if (echo_) {
      try {
        write_fully(STDOUT_FILENO, bytes.data(), bytes.size());
      } catch (const std::exception&) {
        echo_ = false;  // our stdout went away; keep recording
      }
    }
    last_output_ = mono_now();
  }

  // Reads what the terminal holds; false when nothing more is there now.
  bool read_master(std::string_view& got) {
    while (master_open_) {
      const ssize_t n = read(master_, buf_.data(), buf_.size());
      if (n > 0) {
        got = {buf_.data(), static_cast<size_t>(n)};
        return true;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return false;
      master_open_ = false;  // EIO: every writer closed the terminal
    }
    return false;
  }

  void drain_master() {
    for (std::string_view got; read_master(got);) record(got);
  }

  // What the job wrote before it ended may still be on its way through the terminal's
  // buffers, and how long that takes is the kernel's business. So we hold the terminal open
  // ourselves (no end-of-file can come early) and, once the job has ended, write a mark into
  // it: everything the job wrote comes before the mark. Then, with our end closed, output of
  // grandchildren is read until every writer is gone (EIO) or nothing more comes for a
  // moment; all of it takes at most a second (a grandchild may keep the terminal busy, or the
  // job may have stopped the terminal's output, which the mark then waits on in vain).
  void drain_after_exit() {
    const double until = mono_now() + 1.0;
    read_to_mark(until);
    close(slave_);
    slave_ = -1;
    drain_master();
    while (master_open_ && mono_now() < until) {
      pollfd p{master_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) return;
      drain_master();
    }
  }

  void read_to_mark(double until) {
    // An escape sequence (the log drops it if it ever got there) of characters that no
    // output setting the job may have chosen changes.
    const std::string mark = fmt::format("\x1b]GPUALERT;{:08X}{:08X}\a", static_cast<uint32_t>(getpid()),
                                         static_cast<uint32_t>(std::random_device{}()));
    fcntl(slave_, F_SETFL, fcntl(slave_, F_GETFL) | O_NONBLOCK);
    size_t sent = 0;
    std::string held;  // read, not yet recorded: it may hold the start of the mark
    while (master_open_ && mono_now() < until) {
      if (sent < mark.size()) {
        const ssize_t n = write(slave_, mark.data() + sent, mark.size() - sent);
        if (n > 0) sent += static_cast<size_t>(n);
      }
      std::string_view got;
      if (!read_master(got)) {
        pollfd p{master_, POLLIN, 0};
        poll(&p, 1, 10);
        continue;
      }
      held.append(got);
      if (const size_t at = held.find(mark); at != std::string::npos) {
        record(std::string_view(held).substr(0, at));
        record(std::string_view(held).substr(at + mark.size()));
        return;
      }
      const size_t keep = std::min(held.size(), mark.size() - 1);
      record(std::string_view(held).substr(0, held.size() - keep));
      held.erase(0, held.size() - keep);
    }
    record(held);
  }

  void read_input() {
    const ssize_t n = read(STDIN_FILENO, buf_.data(), buf_.size());
    if (n > 0)
      pending_input_.assign(buf_.data(), static_cast<size_t>(n));
    else if (n == 0 || (errno != EINTR && errno != EAGAIN))
      stdin_open_ = false;
  }

  // A job that does not read its input fills the terminal's input queue; what does not fit
  // stays pending (and stdin unread) instead of stalling output, timeouts and signals.
  void forward_input() {
    if (pending_input_.empty() || !master_open_) return;
    const ssize_t n = write(master_, pending_input_.data(), pending_input_.size());
    if (n > 0) {
      pending_input_.erase(0, static_cast<size_t>(n));
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      pending_input_.clear();
      stdin_open_ = false;
    }
  }

  void handle_signals() {
    unsigned char sigs[64];
    const ssize_t n = read(g_signal_pipe[0], sigs, sizeof sigs);
    for (ssize_t i = 0; i < n; ++i) handle_signal(sigs[i]);
  }

  void handle_signal(int sig) {
    switch (sig) {
      case SIGCHLD: return;  // handled by waitpid in check_child
      case SIGTSTP: suspend(true); return;
      case SIGCONT: continue_job(); return;
      case SIGWINCH: {
        winsize w{};
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0) ioctl(master_, TIOCSWINSZ, &w);
        return;
      }
      case SIGTERM:
      case SIGHUP:
        out_.received_signal = sig;
        begin_termination(sig);
        return;
      case SIGINT:
      case SIGQUIT:
        out_.received_signal = sig;
        kill(-pid_, sig);
        return;
      default: kill(-pid_, sig);  // SIGUSR1, SIGUSR2: forwarded as they are
    }
  }

  void begin_termination(int sig) {
    kill(-pid_, sig);
    ending_forced_ = true;
    if (!kill_at_) kill_at_ = mono_now() + o_.grace_s;
  }

  // Job control as a shell sees it: SIGCONT (fg, bg, kill -CONT) continues the job; back in
  // the foreground the terminal is raw again and our input flows to the job.
  void continue_job() {
    foreground_ = stdin_is_tty_ && in_foreground(STDIN_FILENO);
    if (foreground_ && !raw_) raw_.emplace(STDIN_FILENO);
    kill(-pid_, SIGCONT);
    last_output_ = mono_now();  // time spent stopped is not silence
  }

  // Ctrl-Z or SIGTSTP: the job stops (SIGSTOP, which its own session cannot drop), the
  // terminal gets its settings back, and we stop until continued. `stop_job` is false when the
  // job already stopped by itself. We do not wait for the job's stop: a shell in the middle of
  // vfork() stops only once its child has, which may be after we continue it.
  void suspend(bool stop_job) {
    if (stop_job) {
      kill(-pid_, SIGSTOP);
      own_stop_unreported_ = true;
    }
    drain_master();
    raw_.reset();
    kill(getpid(), SIGSTOP);
    continue_job();
  }

  void check_child() {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG | WUNTRACED);
    if (r != pid_) return;
    if (WIFSTOPPED(status)) {
      if (own_stop_unreported_) {
        // The stop we asked for, reported late: we already run again, so must the job.
        own_stop_unreported_ = false;
        kill(-pid_, SIGCONT);
      } else {
        suspend(false);  // stopped from elsewhere: we stop with it, as its shell would
      }
      return;
    }
    child_done_ = true;
    drain_after_exit();
    if (WIFEXITED(status)) {
      out_.exit_code = WEXITSTATUS(status);
      out_.exit_status = *out_.exit_code;
    } else if (WIFSIGNALED(status)) {
      out_.term_signal = WTERMSIG(status);
      out_.exit_status = 128 + *out_.term_signal;
    }
  }

  // The timeout, the grace period's end, a hang, the periodic sync and the caller's tick.
  void check_clocks(double now) {
    if (o_.timeout_s && !out_.timed_out && now - t0_ >= *o_.timeout_s) {
      out_.timed_out = true;
      begin_termination(SIGTERM);
    }
    if (kill_at_ && now >= *kill_at_ && !out_.killed_after_grace) {
      out_.killed_after_grace = true;
      kill(-pid_, SIGKILL);
    }
    if (o_.hang_after_s && !hang_reported_ && now - last_output_ >= *o_.hang_after_s &&
        (!o_.gpus_idle || o_.gpus_idle())) {
      hang_reported_ = true;
      out_.hang_detected = true;
      if (o_.on_hang) o_.on_hang(now - last_output_);
      if (o_.kill_on_hang && !ending_forced_) {
        out_.hang_killed = true;
        begin_termination(SIGTERM);
      }
    }
    if (now - last_sync_ >= o_.sync_interval_s) {
      log_.sync();
      last_sync_ = now;
    }
    if (o_.on_tick && now - last_tick_ >= 0.2) {
      o_.on_tick();
      last_tick_ = now;
    }
  }

  const SupervisorOptions& o_;
  LogStore& log_;
  ChildOutcome out_;
  const bool stdin_is_tty_;
  int master_ = -1, slave_ = -1;
  std::string slave_name_;
  pid_t pid_ = 0;
  bool echo_;
  bool stdin_open_ = stdin_is_tty_;
  bool foreground_ = false;
  bool child_done_ = false;
  bool master_open_ = true;
  bool ending_forced_ = false;        // timeout, hang kill, SIGTERM/SIGHUP: clean up the group
  bool own_stop_unreported_ = false;  // the job's report of our SIGSTOP is still to come
  bool hang_reported_ = false;
  std::optional<RawTerminal> raw_;
  double t0_ = 0, last_output_ = 0, last_sync_ = 0, last_tick_ = 0;
  std::optional<double> kill_at_;  // when the group gets SIGKILL
  std::string pending_input_;      // read from our stdin, not yet accepted by the job's terminal
  std::array<char, 65536> buf_;    // not zeroed: 16 fewer page faults at start-up; reads fill it
};

}  // namespace

ChildOutcome supervise(const SupervisorOptions& options, LogStore& log) {
  if (options.argv.empty()) throw std::invalid_argument("[gpualert] no command given");
  return Supervision(options, log).run();
}

}  // namespace meganeura::alert
