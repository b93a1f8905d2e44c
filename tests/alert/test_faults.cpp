// The faults that matter most, with the real binary: a log that cannot be written, a
// monitor killed with SIGKILL, a relay that never answers, servers that refuse for good, a
// job that never reads its input, and command lines with their own "--".
#include <gtest/gtest.h>
#include <pty.h>

#include <nlohmann/json.hpp>

#include "test_helpers.h"

using namespace alert_test;

namespace {

class Faults : public AlertFixture {
 protected:
  std::map<std::string, std::string> env(int smtp_port) const { return smtp_env(smtp_port); }
  RunSpec job(const std::map<std::string, std::string>& e, std::vector<std::string> options,
              std::vector<std::string> cmd) const {
    return job_spec(e, options, cmd);
  }
  size_t count(const char* sub) const { return state_entries(sub); }
};

bool process_gone(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return true;
  auto close_paren = stat.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < stat.size() && stat[close_paren + 2] == 'Z';
}

}  // namespace

// The log file hits a size limit (as on a full disk, writes fail) while the job runs: the
// job goes on, its output still reaches the terminal, the report says the log is
// incomplete and why, the end of the output is still classified, the notification goes
// out, and the exit status is the job's.
TEST_F(Faults, LogWriteFailureWhileTheJobRuns) {
  SmtpServer smtp(dir / "mail", {});
  RunSpec s = job(env(smtp.port()), {"--notify-timeout", "10"},
                  {"/bin/sh", "-c",
                   "i=0; while [ $i -lt 4000 ]; do echo \"step $i loss 0.12345678901234567890 "
                   "padding padding padding padding\"; i=$((i+1)); done; "
                   "echo 'RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB'; exit 3"});
  // 128 KiB per file for gpualert (and everything it starts); the job writes ~300 KiB.
  s.argv.insert(s.argv.begin(), {"/usr/bin/prlimit", "--fsize=131072"});
  auto r = run(s);
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_NE(r.out.find("step 3999 loss"), std::string::npos) << "output still forwarded";
  EXPECT_NE(r.out.find("CUDA out of memory"), std::string::npos);
  EXPECT_EQ(r.err.find("was not started"), std::string::npos) << r.err;
  auto rep = report();
  EXPECT_EQ(rep["exit_status"], 3);
  EXPECT_EQ(rep["class"], "cuda_oom") << rep.dump(2);
  ASSERT_FALSE(rep["notes"].empty());
  std::string note = rep["notes"][0];
  EXPECT_NE(note.find("incomplete"), std::string::npos) << note;
  EXPECT_NE(note.find("File too large"), std::string::npos) << note;
  ASSERT_EQ(smtp.messages().size(), 1u) << r.err;
  auto parsed =
      run(command({kPython, kTestDir + "/parse_mail.py", smtp.messages()[0].string(), (dir / "got").string()}));
  EXPECT_NE(parsed.out.find("incomplete"), std::string::npos);
  EXPECT_NE(read_file(dir / "got/output-tail.log").find("CUDA out of memory"), std::string::npos);
}

// SIGKILL of gpualert: the job (which ignores SIGHUP and SIGTERM) ends with it, and the
// next run and `outbox list` report the job whose monitor died.
TEST_F(Faults, SigkilledMonitorTakesTheJobAlongAndIsReportedNext) {
  auto e = env(1);
  e.erase("GPUALERT_SMTP_URL");
  auto c = spawn(job(e, {"--no-notify"},
                     {"/bin/sh", "-c",
                      "trap '' HUP TERM; echo $$ > job.pid; echo started; "
                      "while :; do sleep 0.2; done"}));
  for (int i = 0; i < 1000 && read_file(dir / "job.pid").find('\n') == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::string pid_text = read_file(dir / "job.pid");
  ASSERT_FALSE(pid_text.empty());
  pid_t job_pid = std::stoi(pid_text);
  kill(c.pid, SIGKILL);
  finish(c, "", 10);
  bool gone = false;
  for (int i = 0; i < 500 && !(gone = process_gone(job_pid)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!gone) kill(job_pid, SIGKILL);  // do not leave it behind
  EXPECT_TRUE(gone) << "the job outlived its monitor";

  auto listed = run(command({kGpualert, "outbox", "list"}, e));
  EXPECT_NE(listed.out.find("lost its monitor"), std::string::npos) << listed.out << listed.err;
  auto next = run(job(e, {"--no-notify"}, {"/bin/true"}));
  EXPECT_EQ(next.status, 0);
  EXPECT_NE(next.err.find("lost its monitor"), std::string::npos) << next.err;
  // Reported once.
  auto again = run(job(e, {"--no-notify"}, {"/bin/true"}));
  EXPECT_EQ(again.err.find("lost its monitor"), std::string::npos) << again.err;
  size_t lost_reports = 0;
  for (const auto& d : fs::directory_iterator(dir / "state/gpualert/jobs")) {
    auto rep = read_file(d.path() / "report.json");
    if (!rep.empty() && nlohmann::json::parse(rep)["kind"] == "monitor_lost") ++lost_reports;
  }
  EXPECT_EQ(lost_reports, 1u);
}

// A relay that accepts the connection and never answers holds up only its own message:
// the webhook is delivered within the same deadline.
TEST_F(Faults, BlackholedRelayDoesNotSilenceTheWebhook) {
  SmtpServer blackhole(dir / "mail", {"blackhole", "none", "", 0});
  PythonServer http("http_server.py", {"--dir", (dir / "hooks").string()}, dir / "http.port");
  auto e = env(blackhole.port());
  e["GPUALERT_WEBHOOK_URL"] = "http://127.0.0.1:" + std::to_string(http.port()) + "/hook";
  RunSpec s = job(e, {"--notify-timeout", "4"}, {"/bin/sh", "-c", "exit 9"});
  auto r = run(s);
  EXPECT_EQ(r.status, 9);
  EXPECT_LT(r.seconds, 4 + 3);
  EXPECT_EQ(files_with_extension(dir / "hooks", ".json").size(), 1u) << r.err;
  auto rep = report();
  std::map<std::string, std::string> status;
  for (const auto& n : rep["notifications"]) status[n["channel"]] = n["status"];
  EXPECT_EQ(status["webhook"], "sent");
  EXPECT_EQ(status["email"], "queued");
}

// A recipient the relay refuses (550) costs the others nothing, and is given up and
// reported; a webhook answering 404 is given up after a few attempts instead of retried
// forever.
TEST_F(Faults, PermanentRefusalsAreGivenUpAndReported) {
  SmtpServer smtp(dir / "mail", {"reject-rcpt", "none", "", 0});
  auto e = env(smtp.port());
  e["GPUALERT_TO"] = "owner@example.test,reject-me@example.test";
  auto r = run(job(e, {"--notify-timeout", "8"}, {"/bin/sh", "-c", "exit 1"}));
  EXPECT_EQ(r.status, 1);
  ASSERT_EQ(smtp.messages().size(), 1u) << r.err;
  auto envelope = nlohmann::json::parse(read_file(dir / "mail/001.json"));
  EXPECT_EQ(envelope["to"], nlohmann::json::array({"owner@example.test"}));
  EXPECT_EQ(count("outbox"), 0u) << "the refused recipient blocks nothing";
  auto rep = report();
  EXPECT_EQ(rep["notifications"][0]["status"], "sent");
  EXPECT_NE(rep["notifications"][0]["detail"].get<std::string>().find("reject-me@example.test"), std::string::npos)
      << rep.dump(2);
  auto listed = run(command({kGpualert, "outbox", "list"}, e));
  EXPECT_NE(listed.out.find("given up"), std::string::npos) << listed.out;

  PythonServer gone("http_server.py", {"--dir", (dir / "hooks").string(), "--status", "404"}, dir / "http.port");
  auto w = env(1);
  w.erase("GPUALERT_SMTP_URL");
  w["GPUALERT_WEBHOOK_URL"] = "http://127.0.0.1:" + std::to_string(gone.port()) + "/gone";
  run(job(w, {"--notify-timeout", "5"}, {"/bin/sh", "-c", "exit 1"}));
  EXPECT_EQ(count("outbox"), 1u);
  std::string last;
  for (int i = 0; i < 5 && count("outbox") > 0; ++i) {
    auto f = run(command({kGpualert, "outbox", "flush", "--timeout", "5"}, w));
    last = f.out;
  }
  EXPECT_EQ(count("outbox"), 0u) << last;
  EXPECT_NE(last.find("gave up"), std::string::npos) << last;
  EXPECT_NE(last.find("HTTP 404"), std::string::npos) << last;
}

// "--" after the command belongs to the command.
TEST_F(Faults, DoubleDashAfterTheCommandIsTheCommands) {
  auto e = env(1);
  e.erase("GPUALERT_SMTP_URL");
  RunSpec s = job(e, {}, {});
  s.argv = {kGpualert, "--no-notify", "/bin/echo", "train.py", "--", "--lr", "3"};
  auto r = run(s);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("train.py -- --lr 3"), std::string::npos) << r.out;
  s.argv = {kGpualert, "--no-notify", "--", "/bin/echo", "a", "--", "b"};
  r = run(s);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("a -- b"), std::string::npos) << r.out;
}

// A job that never reads its terminal while more than its input queue is typed or pasted:
// output, the timeout and the ending still work.
TEST_F(Faults, PastedInputTheJobNeverReadsStallsNothing) {
  auto e = env(1);
  e.erase("GPUALERT_SMTP_URL");
  int master = -1;
  const pid_t pid = spawn_on_terminal(
      {kGpualert, "--no-notify", "--timeout", "2", "--grace", "1", "--json-report", (dir / "report.json").string(),
       "--", "/bin/sh", "-c", "echo ready; while :; do sleep 0.3; echo tick; done"},
      e, &master);
  std::string out, paste(64 * 1024, 'x');
  size_t pasted = 0;
  auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  bool done = false;
  while (!done && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    char buf[4096];
    ssize_t n = read(master, buf, sizeof buf);
    if (n > 0) out.append(buf, static_cast<size_t>(n));
    if (out.find("ready") != std::string::npos && pasted < paste.size()) {
      ssize_t w = write(master, paste.data() + pasted, paste.size() - pasted);
      if (w > 0) pasted += static_cast<size_t>(w);
    }
    done = waitpid(pid, &status, WNOHANG) == pid;
    if (n <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!done) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  close(master);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(done) << "gpualert stalled; output so far:\n" << out.substr(0, 2000);
  EXPECT_LT(seconds, 15);
  EXPECT_GT(pasted, 8u * 1024) << "the paste must exceed the job's input queue";
  EXPECT_NE(out.find("tick"), std::string::npos);
  EXPECT_EQ(shell_status(status), 143);
  EXPECT_TRUE(report()["timed_out"].get<bool>());
}

// Under Slurm the grace period and the notification deadline together fit in the default
// KillWait of 30 s, with room to spare.
TEST_F(Faults, SlurmShutdownFitsInKillWait) {
  auto e = env(1);
  e["SLURM_JOB_ID"] = "4242";
  auto r = run(command({kGpualert, "config", "check"}, e));
  ASSERT_EQ(r.status, 0) << r.err;
  auto seconds = [&](const std::string& key) {
    auto at = r.out.find(key + " = \"");
    EXPECT_NE(at, std::string::npos) << key << "\n" << r.out;
    return at == std::string::npos ? 1e9 : std::stod(r.out.substr(at + key.size() + 4));
  };
  double total = seconds("grace") + seconds("notify_timeout");
  EXPECT_LE(total, 25) << r.out;
  e.erase("SLURM_JOB_ID");
  r = run(command({kGpualert, "config", "check"}, e));
  EXPECT_NE(r.out.find("grace = \"30s\""), std::string::npos) << r.out;
}
