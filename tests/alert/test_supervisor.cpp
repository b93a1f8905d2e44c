// The wrapper as a user runs it: exit statuses, signals, timeouts, the durable log.
#include <gtest/gtest.h>
#include <pty.h>

#include <nlohmann/json.hpp>

#include "test_helpers.h"

using namespace alert_test;

namespace {

struct Job {
  TempDir dir;
  std::map<std::string, std::string> env() const {
    return {{"XDG_STATE_HOME", (dir / "state").string()}, {"XDG_CONFIG_HOME", (dir / "config").string()}};
  }
  RunSpec spec(std::vector<std::string> options, std::vector<std::string> command) const {
    RunSpec s;
    s.argv = {kGpualert};
    s.argv.insert(s.argv.end(), options.begin(), options.end());
    s.argv.push_back("--");
    s.argv.insert(s.argv.end(), command.begin(), command.end());
    s.env = env();
    s.cwd = dir.path().string();
    return s;
  }
  nlohmann::json report() const { return nlohmann::json::parse(read_file(dir / "report.json")); }
  std::string log_body() const {
    std::string log = read_file(report()["log_path"].get<std::string>());
    auto marker = log.find("# ---- output ----\n");
    return marker == std::string::npos ? log : log.substr(marker + 19);
  }
};

const std::vector<std::string> kReport = {"--no-notify", "--json-report", "report.json"};

}  // namespace

TEST(Supervisor, ExitCodesPassThrough) {
  for (int code : {0, 1, 2, 3, 127, 255}) {
    Job job;
    auto r = run(
        job.spec(kReport, {"/bin/sh", "-c", "echo status " + std::to_string(code) + "; exit " + std::to_string(code)}));
    EXPECT_EQ(r.status, code) << r.err;
    EXPECT_EQ(job.report()["exit_status"], code);
    EXPECT_NE(r.out.find("status " + std::to_string(code)), std::string::npos);
  }
}

TEST(Supervisor, DeathBySignalIs128PlusSignal) {
  const std::vector<std::pair<std::string, int>> cases = {{"SEGV", 139}, {"ABRT", 134}, {"KILL", 137}, {"TERM", 143}};
  for (const auto& [sig, expected] : cases) {
    Job job;
    auto r = run(job.spec(kReport, {"/bin/sh", "-c", "kill -" + sig + " $$"}));
    EXPECT_EQ(r.status, expected) << sig << ": " << r.err;
    EXPECT_EQ(job.report()["signal"], "SIG" + sig);
  }
}

TEST(Supervisor, CommandNotFoundIs127WithReason) {
  Job job;
  auto r = run(job.spec(kReport, {"no-such-program-xyz"}));
  EXPECT_EQ(r.status, 127);
  EXPECT_EQ(job.report()["class"], "file_not_found");
}

TEST(Supervisor, StdinIsPassedThrough) {
  Job job;
  auto s = job.spec({"--no-notify"}, {"/bin/sh", "-c", "read line; echo got:$line"});
  s.input = "hello from stdin\n";
  auto r = run(s);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("got:hello from stdin"), std::string::npos) << r.out;
}

TEST(Supervisor, PythonLastLineBeforeSegfaultIsLogged) {
  // Without a terminal Python block-buffers stdout and this line dies with the process.
  Job job;
  auto r = run(job.spec(kReport, {kPython, "-c", "import ctypes\nprint('the very last words')\nctypes.string_at(0)"}));
  EXPECT_EQ(r.status, 139);
  EXPECT_NE(job.log_body().find("the very last words"), std::string::npos);
  EXPECT_EQ(job.report()["class"], "segfault");
}

TEST(Supervisor, StdoutAndStderrKeepTheirOrder) {
  Job job;
  auto r = run(job.spec(kReport, {"/bin/sh", "-c", "echo 1; echo 2 >&2; echo 3; echo 4 >&2; echo 5"}));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(job.log_body(), "1\n2\n3\n4\n5\n");
}

// The last writes of a job that exits at once are still in the terminal's buffers when the
// wrapper learns of the exit; all of them reach the log and the echo, and nothing the
// wrapper uses to find their end shows in either.
TEST(Supervisor, OutputWrittenJustBeforeExitIsAllRecorded) {
  const std::string script =
      "import os\n"
      "lines = ''.join(f'line {i:06d} ' + 'x' * (i % 97) + '\\n' for i in range(6000))\n"
      "os.write(1, lines.encode())\n"
      "os.write(2, b'the last line\\n')\n"
      "os._exit(3)\n";
  std::string expected;
  for (int i = 0; i < 6000; ++i) {
    char number[8];
    std::snprintf(number, sizeof number, "%06d", i);
    expected += "line " + std::string(number) + " " + std::string(i % 97, 'x') + "\n";
  }
  expected += "the last line\n";
  for (int trial = 0; trial < 10; ++trial) {
    Job job;
    auto r = run(job.spec(kReport, {kPython, "-c", script}));
    ASSERT_EQ(r.status, 3) << r.err;
    ASSERT_EQ(job.log_body(), expected) << "trial " << trial;
    ASSERT_EQ(r.out, expected) << "trial " << trial;
  }
}

// A job that stopped its terminal's output (as Ctrl-S does) cannot hold the wrapper after it
// has ended.
TEST(Supervisor, StoppedTerminalOutputDoesNotHoldTheWrapper) {
  Job job;
  auto r = run(job.spec(kReport, {kPython, "-c",
                                  "import os, termios\nos.write(1, b'before the stop\\n')\n"
                                  "termios.tcflow(1, termios.TCOOFF)\nos._exit(5)\n"}));
  EXPECT_EQ(r.status, 5) << r.err;
  EXPECT_LT(r.seconds, 20.0);
  EXPECT_NE(job.log_body().find("before the stop"), std::string::npos) << job.log_body();
}

TEST(Supervisor, CarriageReturnProgressKeepsLastState) {
  Job job;
  auto r = run(job.spec(kReport, {"/usr/bin/printf", "start\\n 10%%|#   |\\r 50%%|##  |\\r100%%|####|\\ndone\\n"}));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(job.log_body(), "start\n100%|####|\ndone\n");
}

TEST(Supervisor, LogHeaderIsOnDiskBeforeTheChildRuns) {
  Job job;
  // The child reads its own log: the header must already be there.
  auto r = run(job.spec(kReport, {"/bin/sh", "-c", "cat \"$XDG_STATE_HOME\"/gpualert/jobs/*/output.log"}));
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("# gpualert job "), std::string::npos) << r.out;
  auto mode = fs::status(job.report()["job_dir"].get<std::string>()).permissions();
  EXPECT_EQ(mode & fs::perms::all, fs::perms::owner_all);
}

TEST(Supervisor, UnrecordableJobDoesNotStart) {
  Job job;
  write_file(job.dir / "not-a-dir", "x");
  auto s = job.spec({"--no-notify", "--state-dir", (job.dir / "not-a-dir").string()}, {"/bin/sh", "-c", "touch ran"});
  auto r = run(s);
  EXPECT_EQ(r.status, 125);
  EXPECT_FALSE(fs::exists(job.dir / "ran"));
  EXPECT_NE(r.err.find("not-a-dir"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not started"), std::string::npos) << r.err;
}

TEST(Supervisor, LogSurvivesSigkillOfTheWrapper) {
  Job job;
  auto c = spawn(job.spec({"--no-notify"}, {"/bin/sh", "-c", "echo written before the kill; sleep 3"}));
  fs::path jobs = job.dir / "state/gpualert/jobs";
  std::string body;
  for (int i = 0; i < 500 && body.find("before the kill") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(jobs, ec)) body = read_file(e.path() / "output.log");
  }
  kill(c.pid, SIGKILL);
  finish(c, "", 10);
  EXPECT_NE(body.find("written before the kill"), std::string::npos);
}

TEST(Supervisor, SigtermToWrapperReachesChildAndReportIsWritten) {
  Job job;
  auto c = spawn(job.spec(kReport, {kPython, "-c",
                                    "import signal, sys, time\n"
                                    "def bye(*a):\n    print('child saw SIGTERM, saving'); sys.exit(0)\n"
                                    "signal.signal(signal.SIGTERM, bye)\nprint('ready', flush=True)\n"
                                    "time.sleep(60)"}));
  std::string out;
  char buf[256];
  while (out.find("ready") == std::string::npos) {
    ssize_t n = read(c.out, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  wait_until_asleep(c.pid);
  kill(c.pid, SIGTERM);
  auto r = finish(c, "", 30);
  EXPECT_EQ(r.status, 0) << "the child exited 0 after handling SIGTERM";
  auto rep = job.report();
  EXPECT_EQ(rep["received_signal"], "SIGTERM");
  EXPECT_EQ(rep["class"], "time_limit");
  EXPECT_NE(job.log_body().find("child saw SIGTERM"), std::string::npos);
}

TEST(Supervisor, GracePeriodThenSigkill) {
  Job job;
  auto c = spawn(job.spec({"--no-notify", "--grace", "1", "--json-report", "report.json"},
                          {"/bin/sh", "-c", "trap '' TERM; echo ignoring; sleep 30"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(c.pid, SIGTERM);
  auto r = finish(c, "", 30);
  EXPECT_EQ(r.status, 137);
  EXPECT_LT(r.seconds, 5);
  EXPECT_EQ(job.report()["class"], "time_limit");
}

TEST(Supervisor, TimeoutEndsGrandchildrenToo) {
  Job job;
  // The grandchild ignores SIGTERM and would outlive a kill of the direct child alone.
  auto r =
      run(job.spec({"--no-notify", "--timeout", "1", "--grace", "0.5", "--json-report", "report.json"},
                   {"/bin/sh", "-c", "sh -c \"trap '' TERM; exec sleep 60\" & echo $! > grandchild.pid; sleep 60"}));
  EXPECT_EQ(r.status, 143);
  EXPECT_LT(r.seconds, 10);
  EXPECT_TRUE(job.report()["timed_out"].get<bool>());
  EXPECT_EQ(job.report()["class"], "time_limit");
  pid_t pid = std::stoi(read_file(job.dir / "grandchild.pid"));
  bool alive = true;
  for (int i = 0; i < 100 && alive; ++i) {
    std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    alive = !stat.empty() && stat.find(") Z") == std::string::npos;
    if (alive) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(alive) << "grandchild " << pid << " survived the timeout";
}

TEST(Supervisor, HangIsDetectedAndKilled) {
  Job job;
  auto r = run(
      job.spec({"--no-notify", "--hang-after", "0.5", "--kill-on-hang", "--grace", "1", "--json-report", "report.json"},
               {"/bin/sh", "-c", "echo working; sleep 30"}));
  EXPECT_EQ(r.status, 143);
  EXPECT_LT(r.seconds, 10);
  EXPECT_EQ(job.report()["class"], "hang");
  EXPECT_NE(r.err.find("possible hang"), std::string::npos);
}

TEST(Supervisor, ReportWithoutGpuSaysSo) {
  Job job;
  auto r = run(job.spec(kReport, {"/bin/true"}));
  EXPECT_EQ(r.status, 0);
  auto rep = job.report();
  for (const char* key : {"job_id", "command", "start_time", "end_time", "exit_status", "signal", "class", "evidence",
                          "log_path", "attachments", "skipped_attachments", "notifications", "telemetry", "energy"})
    EXPECT_TRUE(rep.contains(key)) << key;
  EXPECT_EQ(rep["class"], "success");
  if (!rep["telemetry"]["gpu_available"].get<bool>()) {
    EXPECT_FALSE(rep["telemetry"]["gpu_note"].get<std::string>().empty());
  }
}

// GPU telemetry runs in gpualert-gpu against a stand-in NVML library (tests/energy/fake_nvml.c)
// that reports a constant power draw and an energy counter integrating it over real time.
RunSpec gpu_job(const Job& job, std::vector<std::string> command, std::map<std::string, std::string> extra = {}) {
  RunSpec s = job.spec(kReport, std::move(command));
  s.env["GPUALERT_NVML_LIBRARY"] = FAKE_NVML_PATH;
  s.env["FAKE_NVML_DEVICES"] = "2";
  s.env["FAKE_NVML_POWER_MW"] = "200000";
  for (auto& [k, v] : extra) s.env[k] = v;
  return s;
}

double job_seconds(const nlohmann::json& rep) { return rep["energy"]["duration_s"].get<double>(); }

TEST(Supervisor, GpuTelemetryAndEnergyFromTheCounter) {
  Job job;
  auto r = run(gpu_job(job, {"/bin/sh", "-c", "echo training; sleep 1.5"}));
  ASSERT_EQ(r.status, 0) << r.err;
  auto rep = job.report();
  const auto& t = rep["telemetry"];
  ASSERT_TRUE(t["gpu_available"].get<bool>()) << t.dump();
  ASSERT_EQ(t["gpus"].size(), 2u);
  for (const auto& g : t["gpus"]) {
    EXPECT_EQ(g["name"], "NVIDIA H100 80GB HBM3");
    EXPECT_GE(g["samples"].get<int>(), 2);  // one a second plus a last one at the end
    EXPECT_EQ(g["util_max_pct"].get<double>(), 50);
    EXPECT_EQ(g["power_max_w"].get<double>(), 200);
  }
  // The counter's difference over the job: 200 W times the sampled span (so 200 W on
  // average over it, within 5% for the jitter between a read and its timestamp), a span that
  // lies within the job's duration. How much of the job the helper's start-up misses depends
  // on the machine's load, so no lower bound is put on the span itself.
  const double seconds = job_seconds(rep);
  ASSERT_EQ(rep["energy"]["devices"].size(), 2u);
  double total = 0;
  for (const auto& d : rep["energy"]["devices"]) {
    EXPECT_EQ(d["source"], "nvml-energy");
    EXPECT_LE(d["joules"].get<double>(), 200 * seconds * 1.01);
    EXPECT_GT(d["joules"].get<double>(), 0);
    EXPECT_NEAR(d["avg_watts"].get<double>(), 200, 10);
    total += d["joules"].get<double>();
  }
  EXPECT_NEAR(rep["energy"]["total_joules"].get<double>(), total, 1e-6);
}

TEST(Supervisor, GpuEnergyIntegratedFromPowerWithoutACounter) {
  Job job;
  auto r = run(gpu_job(job, {"/bin/sleep", "1.5"}, {{"FAKE_NVML_NO_ENERGY", "1"}}));
  ASSERT_EQ(r.status, 0) << r.err;
  auto rep = job.report();
  const double seconds = job_seconds(rep);
  ASSERT_EQ(rep["energy"]["devices"].size(), 2u);
  for (const auto& d : rep["energy"]["devices"]) {
    EXPECT_EQ(d["source"], "nvml-power");
    // Constant power: the trapezoid rule is exact over the sampled span.
    EXPECT_LE(d["joules"].get<double>(), 200 * seconds * 1.01);
    EXPECT_GE(d["joules"].get<double>(), 200 * (seconds - 0.5));
  }
}

TEST(Supervisor, XidEventClassifiesAsGpuHardware) {
  Job job;
  auto r = run(gpu_job(
      job,
      {"/bin/sh", "-c", "echo step 1; sleep 1; echo 'RuntimeError: CUDA error: unspecified launch failure'; exit 1"},
      {{"FAKE_NVML_XID", "79"}}));
  EXPECT_EQ(r.status, 1);
  auto rep = job.report();
  EXPECT_EQ(rep["class"], "gpu_hardware") << rep.dump(1);
  EXPECT_NE(rep["telemetry"]["gpu_events"].dump().find("Xid 79 on GPU"), std::string::npos);
}

TEST(Supervisor, SilentJobWithBusyGpusIsNotAHang) {
  // No output for longer than --hang-after, but the GPUs are working (50% by default in the
  // stand-in): no hang. The same silence with idle GPUs is one.
  Job busy;
  RunSpec s = gpu_job(busy, {"/bin/sh", "-c", "echo start; sleep 2.5; echo done"});
  s.argv.insert(s.argv.begin() + 1, {"--hang-after", "1"});
  auto r = run(s);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(busy.report()["class"], "success");
  EXPECT_EQ(r.err.find("possible hang"), std::string::npos) << r.err;

  Job idle;
  RunSpec t = gpu_job(idle, {"/bin/sh", "-c", "echo start; sleep 2.5; echo done"}, {{"FAKE_NVML_UTIL", "0"}});
  t.argv.insert(t.argv.begin() + 1, {"--hang-after", "1"});
  auto q = run(t);
  EXPECT_EQ(q.status, 0) << q.err;
  EXPECT_NE(q.err.find("possible hang"), std::string::npos) << q.err;
  EXPECT_TRUE(idle.report()["hang_detected"].get<bool>()) << idle.report().dump(1);
}

TEST(Supervisor, HungGpuDriverCannotHoldTheWrapper) {
  // The driver hangs in the middle of the job: the helper is stuck inside NVML, and
  // gpualert must still return the job's status within its telemetry deadline.
  Job job;
  std::string state = (job.dir / "nvml.state").string();
  auto r = run(gpu_job(job, {"/bin/sh", "-c", "sleep 1.2; echo hang=1 > " + state + "; sleep 0.5; exit 3"},
                       {{"FAKE_NVML_STATE", state}}));
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_LT(r.seconds, 1.7 + 2.0 + 3.0);  // the job, the 2 s deadline, slack for a loaded machine
  auto rep = job.report();
  EXPECT_NE(rep["telemetry"]["gpu_note"].get<std::string>().find("did not stop"), std::string::npos)
      << rep["telemetry"].dump();
  EXPECT_GE(rep["telemetry"]["gpus"][0]["samples"].get<int>(), 1);  // what came before is kept
}

TEST(Supervisor, SlurmVariablesEnrichTheReport) {
  Job job;
  auto s = job.spec(kReport, {"/bin/true"});
  s.env["SLURM_JOB_ID"] = "4242";
  s.env["SLURM_JOB_NAME"] = "train-llm";
  s.env["SLURM_ARRAY_TASK_ID"] = "7";
  auto r = run(s);
  EXPECT_EQ(r.status, 0);
  auto rep = job.report();
  EXPECT_EQ(rep["slurm"]["SLURM_JOB_ID"], "4242");
  EXPECT_EQ(rep["slurm"]["SLURM_ARRAY_TASK_ID"], "7");
  EXPECT_NE(rep["job_id"].get<std::string>().find("4242"), std::string::npos);
}

TEST(Supervisor, BadFlagsAreOneLineErrors) {
  Job job;
  auto r2 = run(command({kGpualert, "--no-notify"}, job.env()));
  EXPECT_EQ(r2.status, 2);
  EXPECT_NE(r2.err.find("no command given"), std::string::npos) << r2.err;
  // Parse errors: status 2, one line naming the culprit, nothing run.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{kGpualert, "--no-notfy", "--", "/bin/true"}, "unknown option '--no-notfy'"},
      {{kGpualert, "-q", "/bin/true"}, "unknown option '-q'"},
      {{kGpualert, "--no-notify", "--timeout"}, "option --timeout needs a value"},
      {{kGpualert, "--quiet=yes", "--", "/bin/true"}, "option --quiet takes no value"},
      {{kGpualert, "classify", "x.log", "--exit-status", "1", "--signal", "9"}, "not both"},
      {{kGpualert, "classify", "x.log", "--exit-status", "one"}, "'one' is not a number"},
      {{kGpualert, "outbox", "send"}, "unknown action 'send'"},
      // Bad option values are usage errors too, named, before any config is read.
      {{kGpualert, "--timeout", "0", "/bin/true"}, "--timeout must be positive"},
      {{kGpualert, "--timeout", "5 parsecs", "/bin/true"}, "--timeout: invalid duration"},
      {{kGpualert, "--hang-after", "nan", "/bin/true"}, "--hang-after: invalid duration 'nan'"},
      {{kGpualert, "--grace", "-1", "/bin/true"}, "--grace: invalid duration '-1'"},
      {{kGpualert, "--notify-timeout", "0", "/bin/true"}, "--notify-timeout must be positive"},
      {{kGpualert, "--kill-on-hang", "/bin/true"}, "--kill-on-hang needs --hang-after"},
      {{kGpualert, "--redact", "(", "/bin/true"}, "--redact: bad pattern '('"},
      {{kGpualert, "--smtp-url", "http://relay", "/bin/true"}, "--smtp-url must start with smtp://"},
      {{kGpualert, "classify", kTestDir + "/test_supervisor.cpp", "--signal", "SIGBOGUS"},
       "unknown signal 'SIGBOGUS' (--signal)"},
      {{kGpualert, "outbox", "flush", "--timeout", "inf"}, "--timeout: 'inf' is not a number"},
      {{kGpualert, "outbox", "flush", "--timeout", "-1"}, "--timeout must be a positive number"},
      {{kGpualert, "eval", ".", "--split", "test"}, "--split must be train, tune or heldout"},
      {{kGpualert, "eval", ".", "--min-accuracy", "95"}, "must be from 0 to 1"},
      {{kGpualertSend, "--timeout", "0"}, "--timeout must be a positive number"},
  };
  for (const auto& [argv, message] : cases) {
    auto e = run(command(argv, job.env()));
    EXPECT_EQ(e.status, 2) << message;
    EXPECT_NE(e.err.find(message), std::string::npos) << e.err;
    EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
  }
  // A config that cannot be used is not a usage error: 125, naming the key, nothing run.
  fs::create_directories(job.dir / "config/gpualert");
  write_file(job.dir / "config/gpualert/config.toml", "[run]\ngrace = nan\n");
  auto c = run(job.spec({"--no-notify"}, {"/bin/sh", "-c", "touch ran"}));
  EXPECT_EQ(c.status, 125);
  EXPECT_NE(c.err.find("run.grace: expected a duration from 0 to"), std::string::npos) << c.err;
  EXPECT_FALSE(fs::exists(job.dir / "ran"));
}

TEST(Supervisor, OptionFormsAndCommandWithoutDoubleDash) {
  Job job;
  // --name=value, and a command that starts at the first word, its own flags untouched.
  RunSpec s = job.spec({}, {});
  s.argv = {kGpualert,  "--no-notify", "--json-report=report.json", "--timeout=30s",
            "/bin/sh",  "-c",          "echo \"$0 $1\"; exit 4",    "--quiet",
            "--timeout"};
  auto r = run(s);
  EXPECT_EQ(r.status, 4) << r.err;
  EXPECT_NE(r.out.find("--quiet --timeout"), std::string::npos) << r.out;
  EXPECT_EQ(job.report()["exit_status"], 4);
  auto h = run(command({kGpualert, "--help"}));
  EXPECT_EQ(h.status, 0);
  for (const char* text : {"Usage: gpualert [options] -- CMD", "--hang-after DURATION", "gpualert classify"})
    EXPECT_NE(h.out.find(text), std::string::npos) << text;
}

// The reference tool answered Ctrl-C with an immediate SIGKILL; here SIGINT and SIGUSR1
// reach the job, which can clean up and decide its own exit status. "ready" is printed inside
// the try: Python may run the signal handlers right after that print returns.
TEST(Supervisor, SigintAndSigusr1AreForwardedToTheJob) {
  Job job;
  auto c = spawn(job.spec(kReport, {kPython, "-c",
                                    "import signal, sys, time\n"
                                    "signal.signal(signal.SIGUSR1, lambda *a: print('got usr1', flush=True))\n"
                                    "try:\n    print('ready', flush=True)\n    time.sleep(60)\n    time.sleep(60)\n"
                                    "except KeyboardInterrupt:\n    print('saving after interrupt'); sys.exit(0)\n"}));
  std::string out;
  char buf[256];
  auto wait_for = [&](const std::string& what) {
    while (out.find(what) == std::string::npos) {
      ssize_t n = read(c.out, buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
  };
  wait_for("ready");
  wait_until_asleep(c.pid);
  kill(c.pid, SIGUSR1);
  wait_for("got usr1");
  wait_until_asleep(c.pid);  // back in its sleep after the handler
  kill(c.pid, SIGINT);
  auto r = finish(c, "", 30);
  EXPECT_EQ(r.status, 0) << r.err;
  std::string body = job.log_body();
  EXPECT_NE(body.find("got usr1"), std::string::npos) << body;
  EXPECT_NE(body.find("saving after interrupt"), std::string::npos) << body;
}

// gpualert started from a terminal: keystrokes reach the job through its own terminal, and
// Ctrl-C there interrupts the job (not gpualert), which can still clean up.
TEST(Supervisor, InteractiveTerminalInputAndCtrlC) {
  Job job;
  int master = -1;
  const pid_t pid = spawn_on_terminal(
      {kGpualert, "--no-notify", "--json-report", (job.dir / "report.json").string(), "--", kPython, "-c",
       "import sys, time\nname = input('name? ')\n"
       "try:\n    print('hello', name, flush=True)\n    time.sleep(60)\n"
       "except KeyboardInterrupt:\n    print('interrupted cleanly', flush=True)\n"},
      job.env(), &master);
  std::string out;
  auto wait_for = [&](const std::string& what) {
    char buf[512];
    for (int i = 0; i < 300 && out.find(what) == std::string::npos; ++i) {
      pollfd p{master, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      ssize_t n = read(master, buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out.find(what) != std::string::npos;
  };
  ASSERT_TRUE(wait_for("name? ")) << out;
  ASSERT_EQ(write(master, "ada\r", 4), 4);
  ASSERT_TRUE(wait_for("hello ada")) << out;
  wait_until_asleep(pid);  // a person's keystroke finds the job in its sleep
  ASSERT_EQ(write(master, "\x03", 1), 1);
  EXPECT_TRUE(wait_for("interrupted cleanly")) << out;
  int status = 0;
  waitpid(pid, &status, 0);
  close(master);
  EXPECT_EQ(shell_status(status), 0);
  EXPECT_EQ(job.report()["exit_status"], 0);
}
