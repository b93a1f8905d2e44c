// Job control through the real binary: Ctrl-Z on a terminal, SIGTSTP/SIGCONT as a shell
// sends them, and a start in the background ('&'). Every wait has a deadline far above the
// time the step takes, and polls the state it waits for.
#include <gtest/gtest.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <cstdlib>
#include <functional>

#include "test_helpers.h"

using namespace alert_test;

namespace {

// The state letter of /proc/PID/stat ('T' stopped, 'S' sleeping, ...); 0 when gone.
char process_state(pid_t pid) {
  auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? 0 : stat[close + 2];
}

bool wait_for(const std::function<bool()>& cond, double timeout_s = 30) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

// Waits for `pid` to stop or end; returns its wait status, or -1 at the deadline.
int wait_status(pid_t pid, double timeout_s = 30) {
  int st = 0;
  bool done = wait_for([&] { return waitpid(pid, &st, WNOHANG | WUNTRACED) == pid; }, timeout_s);
  return done ? st : -1;
}

pid_t read_pid(const fs::path& file) {
  pid_t pid = 0;
  wait_for([&] {
    auto text = read_file(file);
    return !text.empty() && text.back() == '\n' && (pid = std::atoi(text.c_str())) > 0;
  });
  return pid;
}

void drain(int master, std::string& out) {
  char buf[4096];
  ssize_t n;
  while ((n = read(master, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
}

std::vector<std::string> gpualert_argv(const TempDir& dir, const std::string& script) {
  return {kGpualert, "--no-notify", "--json-report", (dir / "r.json").string(), "--", "/bin/sh", "-c", script};
}

std::map<std::string, std::string> state_env(const TempDir& dir) {
  return {{"XDG_STATE_HOME", (dir / "state").string()}};
}

// Plays an interactive shell: it leads the terminal's session (so its group is the
// foreground one), starts the command in a process group of its own (in the background, as
// '&' does) and exits 99 when the command stops instead of ending, else with its status.
const char* kShell = R"(
import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], process_group=0)
_, st = os.waitpid(p.pid, os.WUNTRACED)
if os.WIFSTOPPED(st):
    os.kill(p.pid, 9)
    sys.exit(99)
sys.exit(os.WEXITSTATUS(st) if os.WIFEXITED(st) else 98)
)";

}  // namespace

// Ctrl-Z on the terminal stops the job and gpualert (the shell sees a stopped job); SIGCONT
// (fg) continues both, and the job then reads what is typed.
TEST(JobControl, CtrlZStopsTheJobAndContinueResumesIt) {
  TempDir dir;
  int master = -1;
  auto args = gpualert_argv(dir, "echo $$ > " + (dir / "job.pid").string() + "; read line; echo got:$line");
  const pid_t g = spawn_on_terminal(args, state_env(dir), &master);
  std::string out;
  pid_t job = read_pid(dir / "job.pid");
  ASSERT_GT(job, 0);
  ASSERT_EQ(write(master, "\x1a", 1), 1);  // Ctrl-Z
  int st = wait_status(g);
  ASSERT_NE(st, -1) << "gpualert did not stop on Ctrl-Z";
  ASSERT_TRUE(WIFSTOPPED(st)) << st;
  EXPECT_TRUE(wait_for([&] { return process_state(job) == 'T'; }))
      << "the job keeps running while its monitor is stopped";
  kill(g, SIGCONT);
  EXPECT_TRUE(wait_for([&] { return process_state(job) != 'T'; })) << "the job was not continued";
  ASSERT_EQ(write(master, "go\n", 3), 3);
  st = wait_status(g);
  drain(master, out);
  ASSERT_NE(st, -1) << out;
  ASSERT_TRUE(WIFEXITED(st)) << st;
  EXPECT_EQ(WEXITSTATUS(st), 0) << out;
  EXPECT_NE(out.find("got:go"), std::string::npos) << out;
  close(master);
}

// SIGTSTP from elsewhere (kill -TSTP, a scheduler suspending the job) stops the job too.
TEST(JobControl, SigtstpWithoutTerminalStopsTheJob) {
  TempDir dir;
  // The job waits in open() on a FIFO (no forks), then reads one byte and ends.
  auto fifo = dir / "go";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  RunSpec spec =
      command(gpualert_argv(dir, "echo $$ > " + (dir / "job.pid").string() + "; exec head -c 1 " + fifo.string()),
              {{"XDG_STATE_HOME", (dir / "state").string()}});
  Child c = spawn(spec);
  pid_t job = read_pid(dir / "job.pid");
  ASSERT_GT(job, 0);
  kill(c.pid, SIGTSTP);
  int st = 0;
  ASSERT_TRUE(wait_for([&] { return waitpid(c.pid, &st, WNOHANG | WUNTRACED) == c.pid; }));
  ASSERT_TRUE(WIFSTOPPED(st));
  EXPECT_TRUE(wait_for([&] { return process_state(job) == 'T'; })) << "the job keeps running";
  kill(c.pid, SIGCONT);
  EXPECT_TRUE(wait_for([&] { return process_state(job) != 'T'; })) << "the job was not continued";
  int w = open(fifo.c_str(), O_WRONLY);
  ASSERT_GE(w, 0);
  ASSERT_EQ(write(w, "Z", 1), 1);
  close(w);
  auto r = finish(c, "", 60);
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("Z"), std::string::npos) << r.out;
}

// 'gpualert ... &' from an interactive shell: a background process group of the terminal.
// It must run to its end, not stop with SIGTTOU on touching the terminal.
TEST(JobControl, BackgroundStartRunsToTheEnd) {
  TempDir dir;
  int master = -1;
  auto args = gpualert_argv(dir, "echo background-done");
  args.insert(args.begin(), {kPython, "-c", kShell});
  const pid_t shell = spawn_on_terminal(args, state_env(dir), &master);
  std::string out;
  int st = -1;
  bool done = wait_for(
      [&] {
        drain(master, out);
        return waitpid(shell, &st, WNOHANG) == shell;
      },
      60);
  drain(master, out);
  ASSERT_TRUE(done) << out;
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_NE(WEXITSTATUS(st), 99) << "gpualert stopped in the background (SIGTTOU/SIGTTIN)";
  EXPECT_EQ(WEXITSTATUS(st), 0) << out;
  EXPECT_NE(out.find("background-done"), std::string::npos) << out;
  close(master);
}
