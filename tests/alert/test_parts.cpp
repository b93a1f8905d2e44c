// Unit tests of the building blocks: log store, attachments, MIME, parsing helpers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <set>

#include "alert/attachments.h"
#include "alert/log_store.h"
#include "alert/mime.h"
#include "alert/report.h"
#include "alert/telemetry.h"
#include "alert/util.h"
#include "test_helpers.h"

using namespace alert_test;
namespace ga = meganeura::alert;

namespace {

std::string gunzip(const std::string& data) {
  z_stream z{};
  inflateInit2(&z, 15 + 16);
  std::string out;
  char buf[65536];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
  }
  inflateEnd(&z);
  EXPECT_EQ(rc, Z_STREAM_END);
  return out;
}

std::string body_of(const ga::LogStore& log) { return read_file(log.path()).substr(log.body_offset()); }

}  // namespace

TEST(Util, PasswdHome) {
  const std::string text =
      "# comment\n"
      "root:x:0:0:root:/root:/bin/bash\n"
      "+nis::::::\n"
      "short:x:1000\n"
      "alice:x:1000:1000:Alice, Room 1:/home/alice:/bin/sh\n"
      "rel:x:1001:1001::relative/home:/bin/sh\n"
      "big:x:99999999999999999999:1::/home/big:/bin/sh\n"
      "last:x:1002:1002::/home/last:/bin/sh";  // no final newline
  EXPECT_EQ(ga::passwd_home(text, 0), "/root");
  EXPECT_EQ(ga::passwd_home(text, 1000), "/home/alice") << "the malformed uid-1000 line is skipped";
  EXPECT_EQ(ga::passwd_home(text, 1001), "") << "relative home refused";
  EXPECT_EQ(ga::passwd_home(text, 1002), "/home/last");
  EXPECT_EQ(ga::passwd_home(text, 4242), "");
  EXPECT_EQ(ga::passwd_home("", 0), "");
}

TEST(LogStore, ProgressBarsEscapesAndPartialLines) {
  TempDir dir;
  ga::LogStore log(dir / "job", {"id", "cmd", "host", "/", "now"});
  log.append("epoch 1\n\x1b[32mgreen\x1b[0m text\n");
  log.append(" 10%|#  \r 5");  // a redraw split across reads
  log.append("0%|###\r100%|#####|");
  EXPECT_EQ(body_of(log), "epoch 1\ngreen text\n100%|#####|") << "unterminated line is on disk already";
  log.append("\rshort\x1b[K\n");
  log.finish();
  EXPECT_EQ(body_of(log), "epoch 1\ngreen text\nshort\n");
  EXPECT_EQ(ga::find_body_offset(log.path()), log.body_offset());
}

TEST(LogStore, RefusesAnExistingLogAndBadDirectories) {
  TempDir dir;
  { ga::LogStore log(dir / "job", {"id", "cmd", "host", "/", "now"}); }
  EXPECT_THROW(ga::LogStore(dir / "job", {"id", "cmd", "host", "/", "now"}), std::runtime_error);
  write_file(dir / "file", "x");
  try {
    ga::LogStore log(dir / "file" / "job", {"id", "cmd", "host", "/", "now"});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("[gpualert] cannot create directory"), std::string::npos) << e.what();
  }
}

TEST(LogStore, ForeignFilesHaveNoHeader) {
  TempDir dir;
  write_file(dir / "plain.log", "# gpualert is mentioned\nline\n");
  EXPECT_EQ(ga::find_body_offset(dir / "plain.log"), 0u);
}

// An oversize log is cut to head + tail with a marker, compressed, and fits its budget.
TEST(Attachments, OversizeLogIsCutAndCompressed) {
  TempDir dir;
  std::string big;
  for (int i = 0; big.size() < (8u << 20); ++i)
    big += "step " + std::to_string(i) + " loss " + std::to_string(i * 37 % 1000) + "\n";
  big += "FINAL ERROR LINE\n";
  write_file(dir / "output.log", "HEAD\n" + big);
  ga::AttachConfig cfg;
  cfg.max_file = 256 << 10;
  cfg.max_total = 1 << 20;
  cfg.default_outputs = false;
  auto plan = ga::collect_attachments(cfg, {dir / "output.log", 0, {}, dir.path(), dir / "jobs"});
  ASSERT_EQ(plan.blobs.size(), 1u);
  EXPECT_EQ(plan.blobs[0].name, "output.log.gz");
  EXPECT_LE(plan.blobs[0].data.size(), cfg.max_file);
  EXPECT_TRUE(plan.attached[0].truncated);
  std::string text = gunzip(plan.blobs[0].data);
  EXPECT_EQ(text.rfind("HEAD\n", 0), 0u);
  EXPECT_NE(text.find("FINAL ERROR LINE\n"), std::string::npos);
  EXPECT_NE(text.find("gpualert cut"), std::string::npos);
}

TEST(Attachments, SkippedFilesAreListedWithReasons) {
  TempDir dir;
  write_file(dir / "output.log", "ok\n");
  std::string noise;
  unsigned x = 1;
  for (int i = 0; i < (3 << 20); ++i) noise += static_cast<char>((x = x * 1103515245 + 12345) >> 24);
  write_file(dir / "weights.bin", noise);  // binary, incompressible, over budget
  write_file(dir / "a.txt", std::string(300 << 10, 'a'));
  ga::AttachConfig cfg;
  cfg.max_file = 1 << 20;
  cfg.max_total = 1 << 20;
  cfg.default_outputs = false;
  cfg.globs = {"weights.bin", "missing-*.pt", "a.txt"};
  auto plan = ga::collect_attachments(cfg, {dir / "output.log", 0, {}, dir.path(), dir / "jobs"});
  std::map<std::string, std::string> reasons;
  for (const auto& s : plan.skipped) reasons[fs::path(s.path).filename().string()] = s.reason;
  ASSERT_TRUE(reasons.count("weights.bin"));
  EXPECT_NE(reasons["weights.bin"].find("budget"), std::string::npos) << reasons["weights.bin"];
  ASSERT_TRUE(reasons.count("missing-*.pt"));
  EXPECT_NE(reasons["missing-*.pt"].find("no file matches"), std::string::npos);
  for (const auto& s : plan.skipped) {
    if (fs::path(s.path).filename() == "weights.bin") {
      EXPECT_EQ(s.size, noise.size());
    }
  }
  // a.txt compresses to almost nothing and still fits.
  bool has_a = false;
  for (const auto& a : plan.attached) has_a |= a.name == "a.txt.gz";
  EXPECT_TRUE(has_a);
}

// Default outputs are chosen against a reference from the file-timestamp clock, never the
// wall clock: a file the job wrote in the same coarse tick as the reference is attached,
// one last modified before it is not. Times are set explicitly, so the result does not
// depend on the filesystem's clock or granularity.
TEST(Attachments, DefaultOutputsUseTheFileTimestampClock) {
  TempDir dir;
  write_file(dir / "output.log", "ok\n");
  write_file(dir / "metrics.json", "{}\n");
  write_file(dir / "old.csv", "a,b\n");
  write_file(dir / "later.txt", "x\n");
  const timespec ref{1700000000, 500000000};
  auto set_mtime = [&](const char* name, timespec t) {
    timespec times[2] = {t, t};
    ASSERT_EQ(utimensat(AT_FDCWD, (dir / name).c_str(), times, 0), 0) << name;
  };
  set_mtime("metrics.json", ref);                     // same tick as the job's start
  set_mtime("old.csv", {ref.tv_sec - 1, 999999999});  // before it
  set_mtime("later.txt", {ref.tv_sec + 1, 0});
  ga::AttachConfig cfg;
  auto plan = ga::collect_attachments(cfg, {dir / "output.log", 0, ref, dir.path(), dir / "jobs"});
  std::set<std::string> names;
  for (const auto& b : plan.blobs) names.insert(b.name);
  EXPECT_TRUE(names.count("metrics.json"));
  EXPECT_TRUE(names.count("later.txt"));
  EXPECT_FALSE(names.count("old.csv"));
}

// The reference is the log's own mtime at creation: a file written afterwards is never
// older, whatever the wall clock said.
TEST(LogStore, CreatedMtimeIsTheLogsTimestamp) {
  TempDir dir;
  ga::LogStore log(dir / "job", {"id", "cmd", "host", "/", "now"});
  struct stat st {};
  ASSERT_EQ(stat((dir / "job/output.log").c_str(), &st), 0);
  EXPECT_EQ(log.created_mtime().tv_sec, st.st_mtim.tv_sec);
  EXPECT_EQ(log.created_mtime().tv_nsec, st.st_mtim.tv_nsec);
}

// A skipped artifact reaches the owner: it is listed in the message itself.
TEST(Attachments, SkippedArtifactIsNamedInTheEmail) {
  TempDir dir;
  std::string noise;
  unsigned x = 7;
  for (int i = 0; i < (2 << 20); ++i) noise += static_cast<char>((x = x * 1103515245 + 12345) >> 24);
  write_file(dir / "huge.ckpt", noise);
  fs::create_directories(dir / "config/gpualert");
  write_file(dir / "config/gpualert/config.toml",
             "[smtp]\nurl = \"smtp://127.0.0.1:1\"\nto = [\"x@example.test\"]\n[attach]\nmax_file = \"1MiB\"\n");
  RunSpec s = command({kGpualert, "--dry-run", "--attach", "huge.ckpt", "--", "/bin/sh", "-c", "exit 1"},
                      {{"XDG_STATE_HOME", (dir / "state").string()}, {"XDG_CONFIG_HOME", (dir / "config").string()}});
  s.cwd = dir.path().string();
  auto r = run(s);
  EXPECT_EQ(r.status, 1);
  // The text part is base64; decode it through the MIME parser.
  write_file(dir / "m.eml", r.out.substr(r.out.find("From:")));
  auto parsed = run(command({kPython, kTestDir + "/parse_mail.py", (dir / "m.eml").string(), (dir / "x").string()}));
  EXPECT_NE(parsed.out.find("Not attached"), std::string::npos) << parsed.out;
  EXPECT_NE(parsed.out.find("huge.ckpt (2.0 MiB): 2.0 MiB after compression, over the budget of 1.0 MiB"),
            std::string::npos)
      << parsed.out;
}

TEST(Mime, Base64RoundTripsThroughPython) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>(i * 31 % 256);
  ga::EmailParts p{"a@b.test", {"c@d.test"},  "Ünïcode subject",
                   "text",     "<b>html</b>", {{"bin.dat", "application/octet-stream", data}}};
  TempDir dir;
  write_file(dir / "m.eml", ga::build_email(p));
  auto r = run(command({kPython, kTestDir + "/parse_mail.py", (dir / "m.eml").string(), (dir / "x").string()}));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\\u00dcn\\u00efcode subject"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(dir / "x/bin.dat"), data);
}

TEST(Util, DurationsSizesSignals) {
  EXPECT_DOUBLE_EQ(ga::parse_duration("90"), 90);
  EXPECT_DOUBLE_EQ(ga::parse_duration("1h30m"), 5400);
  EXPECT_DOUBLE_EQ(ga::parse_duration("250ms"), 0.25);
  EXPECT_THROW(ga::parse_duration("5 parsecs"), std::invalid_argument);
  EXPECT_THROW(ga::parse_duration(""), std::invalid_argument);
  EXPECT_EQ(ga::parse_size("25MiB"), 25u << 20);
  EXPECT_EQ(ga::parse_size("10k"), 10240u);
  EXPECT_THROW(ga::parse_size("ten"), std::invalid_argument);
  EXPECT_EQ(ga::parse_signal("segv"), SIGSEGV);
  EXPECT_EQ(ga::parse_signal("9"), SIGKILL);
  EXPECT_EQ(ga::signal_name(SIGTERM), "SIGTERM");
  EXPECT_THROW(ga::parse_signal("SIGNOPE"), std::invalid_argument);
  EXPECT_EQ(ga::shell_quote("it's"), "'it'\\''s'");
}

TEST(Util, SmallFilesAndLogTails) {
  TempDir dir;
  const std::string path = (dir / "f.txt").string();
  ga::write_file(path, "header\nline 1\nline 2\nline 3", false);
  EXPECT_EQ(ga::read_file(path).value(), "header\nline 1\nline 2\nline 3");
  EXPECT_EQ(ga::read_file(path, 7).value(), "line 1\nline 2\nline 3");
  EXPECT_EQ(ga::read_file(path, 7, 4).value(), "line");
  EXPECT_FALSE(ga::read_file((dir / "missing").string()).has_value());
  EXPECT_THROW(ga::write_file((dir / "no/such/dir/f").string(), "x", true), std::runtime_error);
  // The last lines after the header (which ends at byte 7), without a trailing newline.
  EXPECT_EQ(ga::tail_lines(path, 7, 2), (std::vector<std::string>{"line 2", "line 3"}));
  EXPECT_EQ(ga::tail_lines(path, 7, 10), (std::vector<std::string>{"line 1", "line 2", "line 3"}));
  // A log over the 256 KiB read window: the cut first line is dropped, the end is exact.
  std::string big = "header\n";
  for (int i = 0; i < 40000; ++i) big += "step " + std::to_string(i) + " loss 0.5\n";
  ga::write_file(path, big, false);
  auto tail = ga::tail_lines(path, 7, 3);
  EXPECT_EQ(tail, (std::vector<std::string>{"step 39997 loss 0.5", "step 39998 loss 0.5", "step 39999 loss 0.5"}));
  EXPECT_EQ(ga::tail_lines(path, 7, 100000).front().rfind("step ", 0), 0u);
}

TEST(Telemetry, CgroupEvidenceParsing) {
  EXPECT_EQ(ga::cgroup_v2_dir("0::/user.slice/job-42\n"), "/sys/fs/cgroup/user.slice/job-42");
  EXPECT_EQ(ga::cgroup_v2_dir("12:memory:/x\n1:name=systemd:/y\n"), "");  // cgroup v1 only
  EXPECT_EQ(ga::cgroup_v2_dir("2:cpu:/a\n0::/b"), "/sys/fs/cgroup/b");
  EXPECT_EQ(ga::parse_oom_kills("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n"), 2u);
  EXPECT_EQ(ga::parse_oom_kills("oom_group_kill 5\n"), 0u);  // a different counter
  EXPECT_EQ(ga::parse_oom_kills(""), 0u);
}

// Telemetry as gpualert uses it, against the stand-in NVML: the helper's failures end as a
// note in the report, never as an error of the job.
TEST(Telemetry, HelperFailuresBecomeNotes) {
  const std::string helper = std::string(MEGANEURA_BINARY_DIR) + "/bin/gpualert-gpu";
  setenv("GPUALERT_NVML_LIBRARY", FAKE_NVML_PATH, 1);
  {
    ga::Telemetry t(0.05, "/nonexistent/gpualert-gpu");
    t.start();
    auto r = t.stop();
    EXPECT_FALSE(r.gpu_available);
    EXPECT_NE(r.gpu_note.find("cannot start /nonexistent/gpualert-gpu"), std::string::npos) << r.gpu_note;
  }
  // The note when the stand-in is steered by `variable`.
  auto note_with = [&](const char* variable, const char* value) {
    setenv(variable, value, 1);
    ga::Telemetry t(0.05, helper);
    t.start();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto r = t.stop();
    unsetenv(variable);
    EXPECT_FALSE(r.gpu_available);
    return r.gpu_note;
  };
  EXPECT_NE(note_with("FAKE_NVML_INIT_FAIL", "1").find("nvmlInit_v2 failed"), std::string::npos);
  EXPECT_NE(note_with("FAKE_NVML_DEVICES", "0").find("found no GPU"), std::string::npos);
  {
    ga::Telemetry t(0.05, helper);  // working: samples every 50 ms
    t.start();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto r = t.stop();
    ASSERT_TRUE(r.gpu_available) << r.gpu_note;
    EXPECT_GE(r.gpus.at(0).samples, 3u);
    EXPECT_EQ(r.gpus.at(0).mem_total_bytes, 80ull << 30);
  }
  unsetenv("GPUALERT_NVML_LIBRARY");
}
