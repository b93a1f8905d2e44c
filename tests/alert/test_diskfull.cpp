// Full disks under gpualert's artefacts: the state directory (log, report, outbox), the
// --json-report path, or both, each on a small tmpfs. Whatever fills up costs only what it
// holds: the exit status is the job's, the other report is written, and the notification
// goes out (directly, through a pipe, when the outbox cannot store it). Mounting needs root
// (CI runs as root); elsewhere the tests are skipped with the reason.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_helpers.h"

using namespace alert_test;

namespace {

// A tmpfs of `size` mounted at `where` (mode 700) for the test's lifetime.
class SmallFs {
 public:
  SmallFs(const fs::path& where, const std::string& size) : where_(where) {
    fs::create_directories(where);
    if (geteuid() != 0) {
      why_ = "mounting a tmpfs needs root (CI runs these as root)";
      return;
    }
    const std::string options = "size=" + size + ",mode=700";
    if (mount("tmpfs", where.c_str(), "tmpfs", 0, options.c_str()) != 0) {
      why_ = std::string("cannot mount a tmpfs here: ") + std::strerror(errno);
      return;
    }
    mounted_ = true;
  }
  ~SmallFs() {
    if (mounted_) umount2(where_.c_str(), MNT_DETACH);
  }
  SmallFs(const SmallFs&) = delete;
  SmallFs& operator=(const SmallFs&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  // Writes a file until the filesystem has no room left.
  void fill() const {
    std::ofstream out(where_ / "filler", std::ios::binary);
    const std::string block(4096, 'x');
    while (out.write(block.data(), block.size())) {
    }
  }

 private:
  fs::path where_;
  bool mounted_ = false;
  std::string why_;
};

// 20,000 lines (about 1 MiB, four times the state filesystem), then the cause, then exit 3.
const std::vector<std::string> kNoisyJob = {
    "/bin/sh", "-c",
    "i=0; while [ $i -lt 20000 ]; do echo \"step $i loss 0.42 lr 1e-4 ....................\"; i=$((i+1)); done; "
    "echo \"FileNotFoundError: [Errno 2] No such file or directory: 'data/val.csv'\"; exit 3"};

class DiskFull : public AlertFixture {
 protected:
  // SMTP and a webhook on loopback; the state directory under `state_home`.
  std::map<std::string, std::string> env(int smtp_port, int http_port, const fs::path& state_home) const {
    auto e = smtp_env(smtp_port);
    e["XDG_STATE_HOME"] = state_home.string();
    e["GPUALERT_WEBHOOK_URL"] = "http://127.0.0.1:" + std::to_string(http_port) + "/hook";
    return e;
  }
  RunResult job(const std::map<std::string, std::string>& e, const fs::path& json_report) const {
    RunSpec s = job_spec(e, {"--notify-timeout", "10", "--quiet"}, kNoisyJob);
    s.argv[2] = json_report.string();  // job_spec puts --json-report DIR/report.json first
    return run(s);
  }
  void expect_delivered(const SmtpServer& smtp) const {
    ASSERT_EQ(smtp.messages().size(), 1u);
    auto r = run(command({kPython, kTestDir + "/parse_mail.py", smtp.messages()[0].string(), (dir / "got").string()}));
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string text = nlohmann::json::parse(r.out)["parts"][0]["text"];
    EXPECT_NE(text.find("file_not_found"), std::string::npos) << "classified from the end of the output\n" << text;
    EXPECT_NE(text.find("data/val.csv"), std::string::npos) << "the last lines are in the message\n" << text;
    EXPECT_EQ(files_with_extension(dir / "hooks", ".json").size(), 1u);
  }
};

#define REQUIRE_MOUNTED(fs_)                                    \
  if (!(fs_).mounted()) {                                       \
    std::fprintf(stderr, "skipped: %s\n", (fs_).why().c_str()); \
    GTEST_SKIP() << (fs_).why();                                \
  }

}  // namespace

// The job fills the state filesystem: the log stops, the report there and the outbox cannot
// be written. The --json-report elsewhere is complete, and both notifications go out
// directly.
TEST_F(DiskFull, StateDirectoryFull) {
  SmallFs state(dir / "state", "256k");
  REQUIRE_MOUNTED(state);
  SmtpServer smtp(dir / "mail", {});
  PythonServer http("http_server.py", {"--dir", (dir / "hooks").string()}, dir / "http.port");
  auto r = job(env(smtp.port(), http.port(), dir / "state"), dir / "report.json");
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  auto rep = report();
  EXPECT_EQ(rep["exit_status"], 3);
  EXPECT_EQ(rep["class"], "file_not_found") << rep.dump(2);
  EXPECT_NE(rep["last_lines"].back().get<std::string>().find("data/val.csv"), std::string::npos);
  const std::string notes = rep["notes"].dump();
  EXPECT_NE(notes.find("log on disk is incomplete"), std::string::npos) << notes;
  EXPECT_NE(notes.find("report in the job's directory could not be written"), std::string::npos) << notes;
  for (const auto& n : rep["notifications"]) {
    EXPECT_EQ(n["status"], "sent") << n.dump();
    EXPECT_NE(n["detail"].get<std::string>().find("delivered directly"), std::string::npos) << n.dump();
  }
  expect_delivered(smtp);
}

// The --json-report's filesystem is full: the report in the state directory is written and
// the notifications go through the outbox as usual.
TEST_F(DiskFull, ReportPathFull) {
  SmallFs reports(dir / "reports", "64k");
  REQUIRE_MOUNTED(reports);
  reports.fill();
  SmtpServer smtp(dir / "mail", {});
  PythonServer http("http_server.py", {"--dir", (dir / "hooks").string()}, dir / "http.port");
  auto r = job(env(smtp.port(), http.port(), dir / "state"), dir / "reports/report.json");
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_NE(r.err.find((dir / "reports/report.json").string()), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "reports/report.json.tmp")) << "no partial file left behind";
  std::vector<fs::path> written;
  for (const auto& e : fs::recursive_directory_iterator(dir / "state/gpualert/jobs"))
    if (e.path().filename() == "report.json") written.push_back(e.path());
  ASSERT_EQ(written.size(), 1u);
  auto rep = nlohmann::json::parse(read_file(written[0]));
  EXPECT_EQ(rep["exit_status"], 3);
  EXPECT_EQ(rep["class"], "file_not_found");
  for (const auto& n : rep["notifications"]) EXPECT_EQ(n["status"], "sent") << n.dump();
  expect_delivered(smtp);
}

// Both full: no report can be written anywhere, yet the exit status is the job's and the
// notifications, classified from the output kept in memory, still go out.
TEST_F(DiskFull, StateDirectoryAndReportPathFull) {
  SmallFs state(dir / "state", "256k");
  REQUIRE_MOUNTED(state);
  SmallFs reports(dir / "reports", "64k");
  REQUIRE_MOUNTED(reports);
  reports.fill();
  SmtpServer smtp(dir / "mail", {});
  PythonServer http("http_server.py", {"--dir", (dir / "hooks").string()}, dir / "http.port");
  auto r = job(env(smtp.port(), http.port(), dir / "state"), dir / "reports/report.json");
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_NE(r.err.find("report.json.tmp': No space left on device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("reports/report.json.tmp': No space left on device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("delivered directly"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exit status 3"), std::string::npos) << "the summary line still comes";
  expect_delivered(smtp);
}
