#include "common/process.h"

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

extern char** environ;

namespace meganeura::common {
namespace {

constexpr int kStdFds[3] = {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO};
constexpr int kOpenFlags[3] = {O_RDONLY, O_WRONLY | O_CREAT | O_APPEND, O_WRONLY | O_CREAT | O_APPEND};

// The argument and environment vectors, built before the child exists: after a vfork-like
// start the child may not allocate.
struct Vectors {
  std::vector<std::string> env_storage;
  std::vector<char*> argv, envp;
  explicit Vectors(const SpawnOptions& o) {
    for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (!o.env) return;
    env_storage = *o.env;
    for (auto& e : env_storage) envp.push_back(e.data());
    envp.push_back(nullptr);
  }
  char* const* environment() const { return envp.empty() ? environ : envp.data(); }
};

const StdStream& stream(const SpawnOptions& o, int fd) { return fd == 0 ? o.in : fd == 1 ? o.out : o.err; }

// True when the terminal, not the options' stream, provides `fd`.
bool from_terminal(const SpawnOptions& o, int fd) {
  return o.new_session && !o.terminal.empty() && (fd != STDIN_FILENO || o.terminal_for_stdin);
}

class FileActions {
 public:
  explicit FileActions(const SpawnOptions& o) {
    posix_spawn_file_actions_init(&fa_);
    // A session leader without a terminal that opens one makes it its controlling terminal.
    if (o.new_session && !o.terminal.empty()) {
      posix_spawn_file_actions_addopen(&fa_, STDOUT_FILENO, o.terminal.c_str(), O_RDWR, 0);
      posix_spawn_file_actions_adddup2(&fa_, STDOUT_FILENO, STDERR_FILENO);
      if (o.terminal_for_stdin) posix_spawn_file_actions_adddup2(&fa_, STDOUT_FILENO, STDIN_FILENO);
    }
    for (int i = 0; i < 3; ++i) {
      const StdStream& s = stream(o, kStdFds[i]);
      if (from_terminal(o, kStdFds[i])) continue;
      if (s.fd >= 0)
        posix_spawn_file_actions_adddup2(&fa_, s.fd, kStdFds[i]);
      else if (!s.path.empty())
        posix_spawn_file_actions_addopen(&fa_, kStdFds[i], s.path.c_str(), kOpenFlags[i], 0644);
    }
    if (!o.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa_, o.cwd.c_str());
  }
  ~FileActions() { posix_spawn_file_actions_destroy(&fa_); }
  FileActions(const FileActions&) = delete;
  FileActions& operator=(const FileActions&) = delete;
  const posix_spawn_file_actions_t* get() const { return &fa_; }

 private:
  posix_spawn_file_actions_t fa_;
};

// The signal policy: every signal at its default, nothing blocked.
class Attributes {
 public:
  explicit Attributes(const SpawnOptions& o) {
    posix_spawnattr_init(&attr_);
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attr_, &all);
    posix_spawnattr_setsigmask(&attr_, &none);
    short flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
    if (o.new_session) {
      flags |= POSIX_SPAWN_SETSID;
    } else if (o.own_process_group) {
      flags |= POSIX_SPAWN_SETPGROUP;
      posix_spawnattr_setpgroup(&attr_, 0);
    }
    posix_spawnattr_setflags(&attr_, flags);
  }
  ~Attributes() { posix_spawnattr_destroy(&attr_); }
  Attributes(const Attributes&) = delete;
  Attributes& operator=(const Attributes&) = delete;
  const posix_spawnattr_t* get() const { return &attr_; }

 private:
  posix_spawnattr_t attr_;
};

int spawn_posix(const SpawnOptions& o, const Vectors& v, pid_t* pid) {
  FileActions fa(o);
  Attributes attr(o);
  const char* program = o.argv[0].c_str();
  return o.search_path ? posix_spawnp(pid, program, fa.get(), attr.get(), v.argv.data(), v.environment())
                       : posix_spawn(pid, program, fa.get(), attr.get(), v.argv.data(), v.environment());
}

// What the clone child needs, prepared by the parent (the child shares its memory).
struct CloneArgs {
  const SpawnOptions* o;
  const Vectors* v;
  pid_t parent;
  int error;  // written by the child when its start fails
};

[[noreturn]] void child_fail(CloneArgs* a) {
  a->error = errno;
  _exit(127);
}

// The same policy as the posix_spawn path, by hand: system calls only, no allocation.
void child_streams(CloneArgs* a) {
  const SpawnOptions& o = *a->o;
  if (o.new_session && !o.terminal.empty()) {
    const int fd = open(o.terminal.c_str(), O_RDWR);
    if (fd < 0) child_fail(a);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    if (o.terminal_for_stdin) dup2(fd, STDIN_FILENO);
    if (fd > STDERR_FILENO) close(fd);
  }
  for (int i = 0; i < 3; ++i) {
    const StdStream& s = stream(o, kStdFds[i]);
    if (from_terminal(o, kStdFds[i])) continue;
    int fd = s.fd;
    if (fd < 0 && !s.path.empty() && (fd = open(s.path.c_str(), kOpenFlags[i], 0644)) < 0) child_fail(a);
    if (fd >= 0 && dup2(fd, kStdFds[i]) < 0) child_fail(a);
  }
}

// Runs in the new process on its own stack, sharing the parent's memory until exec. Not
// instrumented by AddressSanitizer: its frames would poison the shadow of a stack that is
// unmapped at exec without unwinding.
extern "C" __attribute__((no_sanitize("address"))) int clone_child(void* raw) {
  auto* a = static_cast<CloneArgs*>(raw);
  const SpawnOptions& o = *a->o;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != a->parent) _exit(127);  // the parent died before the line above
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) sigaction(s, &dfl, nullptr);  // SIGKILL, SIGSTOP: refused, harmless
  if (o.new_session ? setsid() < 0 : o.own_process_group && setpgid(0, 0) != 0) child_fail(a);
  child_streams(a);
  if (!o.cwd.empty() && chdir(o.cwd.c_str()) != 0) child_fail(a);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  char* const* envp = a->v->environment();
  if (o.search_path)
    execvpe(o.argv[0].c_str(), a->v->argv.data(), envp);
  else
    execve(o.argv[0].c_str(), a->v->argv.data(), envp);
  child_fail(a);
}

int spawn_clone(const SpawnOptions& o, const Vectors& v, pid_t* pid) {
  CloneArgs args{&o, &v, getpid(), 0};
  constexpr size_t kStack = 64 * 1024;
  void* stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return errno;
  // No handler of the caller may run in the child before exec.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t p = clone(clone_child, static_cast<char*>(stack) + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  const int clone_errno = errno;
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

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int spawn(const SpawnOptions& options, pid_t* pid) {
  if (options.argv.empty()) return EINVAL;
  const Vectors v(options);
  return options.die_with_parent ? spawn_clone(options, v, pid) : spawn_posix(options, v, pid);
}

int spawn_on_terminal(SpawnOptions options, pid_t* pid, int* master) {
  int slave = -1;
  if (openpty(master, &slave, nullptr, nullptr, nullptr) != 0) return errno;
  char name[256] = {};
  int e = ttyname_r(slave, name, sizeof name);
  fcntl(*master, F_SETFD, FD_CLOEXEC);
  fcntl(slave, F_SETFD, FD_CLOEXEC);
  if (e == 0) {
    options.new_session = true;
    options.terminal = name;
    options.terminal_for_stdin = true;
    e = spawn(options, pid);
  }
  close(slave);
  if (e != 0) {
    close(*master);
    *master = -1;
    return e;
  }
  fcntl(*master, F_SETFL, fcntl(*master, F_GETFL) | O_NONBLOCK);
  return 0;
}

int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

int wait_or_kill(pid_t pid, double seconds) {
  const double until = now_s() + seconds;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return status;
    if (now_s() >= until) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int spawn_piped(SpawnOptions options, Piped* child) {
  int fds[3][2];
  int made = 0;
  for (; made < 3; ++made)
    if (pipe2(fds[made], O_CLOEXEC) != 0) break;
  if (made < 3) {
    const int e = errno;
    for (int i = 0; i < made; ++i) close(fds[i][0]), close(fds[i][1]);
    return e;
  }
  options.in = {fds[0][0], ""};
  options.out = {fds[1][1], ""};
  options.err = {fds[2][1], ""};
  pid_t pid = -1;
  const int rc = spawn(options, &pid);
  close(fds[0][0]);
  close(fds[1][1]);
  close(fds[2][1]);
  if (rc != 0) {
    close(fds[0][1]), close(fds[1][0]), close(fds[2][0]);
    return rc;
  }
  *child = {pid, fds[0][1], fds[1][0], fds[2][0]};
  return 0;
}

namespace {

// Moves bytes between the child's pipes and the strings until both output pipes close.
// SIGPIPE (a child that exits without reading its input) is blocked while this thread writes.
void pump(Piped& c, const std::string& input, RunResult& r, double until) {
  size_t written = 0;
  if (input.empty()) close(c.in), c.in = -1;
  fcntl(c.in, F_SETFL, O_NONBLOCK);
  char buf[65536];
  while ((c.out >= 0 || c.err >= 0) && now_s() < until) {
    pollfd fds[3] = {{c.in, POLLOUT, 0}, {c.out, POLLIN, 0}, {c.err, POLLIN, 0}};
    if (poll(fds, 3, 20) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) {
      const ssize_t n = write(c.in, input.data() + written, input.size() - written);
      if (n > 0) written += static_cast<size_t>(n);
      if (n < 0 ? errno != EAGAIN && errno != EINTR : written == input.size()) close(c.in), c.in = -1;
    }
    for (int i = 1; i < 3; ++i) {
      if (fds[i].revents == 0) continue;
      int& fd = i == 1 ? c.out : c.err;
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n > 0)
        (i == 1 ? r.out : r.err).append(buf, static_cast<size_t>(n));
      else if (n == 0 || (errno != EAGAIN && errno != EINTR))
        close(fd), fd = -1;
    }
  }
}

}  // namespace

RunResult collect(Piped c, const std::string& input, double timeout_s) {
  RunResult r;
  const double until = now_s() + timeout_s;
  sigset_t pipe_signal, old;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, &old);
  pump(c, input, r, until);
  for (int fd : {c.in, c.out, c.err})
    if (fd >= 0) close(fd);
  // A SIGPIPE raised by our writes is consumed here, not delivered once unblocked.
  timespec zero{};
  while (sigtimedwait(&pipe_signal, nullptr, &zero) == SIGPIPE) {
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  const int status = wait_or_kill(c.pid, std::max(0.0, until - now_s()));
  r.timed_out = status == -1;
  r.status = r.timed_out ? -1 : shell_status(status);
  return r;
}

RunResult run(SpawnOptions options, const std::string& input, double timeout_s) {
  const std::string program = options.argv.empty() ? std::string() : options.argv[0];
  Piped c;
  if (const int e = spawn_piped(std::move(options), &c); e != 0) {
    RunResult r;
    r.status = e == ENOENT ? 127 : 126;
    r.err = program + ": " + std::strerror(e) + "\n";
    return r;
  }
  return collect(c, input, timeout_s);
}

}  // namespace meganeura::common
