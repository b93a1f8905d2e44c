// Starting another program: one helper, one signal policy.
//
// The child starts with every signal at its default disposition and an empty signal mask,
// whatever the caller ignores, catches or blocks (a monitor that ignores SIGPIPE or blocks
// SIGINT must not hand that on to the program it starts). Where asked, it leads a process
// group of its own (so a Ctrl-C meant for the caller's group does not reach it) or a session
// of its own with a terminal as its controlling terminal.
//
// posix_spawn does the work: no page-table copy (vfork semantics), safe in a process with
// threads. The one thing posix_spawn cannot do is set the parent-death signal; a child that
// must end with its parent is started with clone(CLONE_VM | CLONE_VFORK) instead, with the
// same policy applied by hand before exec.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace meganeura::common {

// Where one of the child's standard streams comes from; neither field set: inherited.
struct StdStream {
  int fd = -1;         // duplicated onto the stream (the caller keeps its own copy)
  std::string path{};  // opened: read-only for stdin, write-only (created, appended) otherwise
};

struct SpawnOptions {
  std::vector<std::string> argv{};  // argv[0] is the program
  bool search_path = false;         // look argv[0] up in PATH when it has no '/'
  // The child's whole environment ("NAME=value"); absent: the caller's.
  std::optional<std::vector<std::string>> env{};
  std::string cwd{};  // empty: the caller's
  StdStream in{}, out{}, err{};
  bool own_process_group = false;  // the child leads a new process group
  bool new_session = false;        // the child leads a new session (and process group)
  // With new_session: the terminal the child opens as its controlling terminal and uses for
  // stdout and stderr, and for stdin with terminal_for_stdin.
  std::string terminal{};
  bool terminal_for_stdin = false;
  // The child gets SIGKILL when the calling thread ends (prctl PR_SET_PDEATHSIG), and does
  // not start when the caller is already gone.
  bool die_with_parent = false;
};

// Starts the program. Returns 0 with *pid set, or the errno of the failed start (ENOENT for
// a missing program, EACCES for one that is not executable, ...).
int spawn(const SpawnOptions& options, pid_t* pid);

// Starts the program as the leader of a new session whose controlling terminal is a fresh
// pseudo-terminal (stdin, stdout and stderr), as a login shell is started. Returns 0 with
// *pid and the terminal's master side in *master (close-on-exec, non-blocking), or an errno.
int spawn_on_terminal(SpawnOptions options, pid_t* pid, int* master);

// The status a shell reports for a wait status: the exit code, or 128 + the signal.
int shell_status(int wait_status);

// Waits at most `seconds` for `pid`, then kills it with SIGKILL and reaps it. Returns the
// wait status, or -1 when it had to be killed.
int wait_or_kill(pid_t pid, double seconds);

// A program started with pipes on its standard streams: the caller's ends.
struct Piped {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
};

// Starts the program with a pipe on each standard stream (the options' streams are
// replaced). Returns 0 or the errno of the failed start.
int spawn_piped(SpawnOptions options, Piped* child);

// A finished program's status (shell style; -1 when it was killed at the deadline) and
// everything it wrote.
struct RunResult {
  int status = -1;
  std::string out;
  std::string err;
  bool timed_out = false;
};

// Writes `input` to the child's stdin and closes it, collects stdout and stderr until the
// child ends, and kills it after `timeout_s`. Closes the caller's ends and reaps the child.
RunResult collect(Piped child, const std::string& input, double timeout_s);

// spawn_piped + collect; a program that cannot start ends with 127 (not found) or 126, and
// the reason on err, as a shell reports it.
RunResult run(SpawnOptions options, const std::string& input, double timeout_s);

}  // namespace meganeura::common
