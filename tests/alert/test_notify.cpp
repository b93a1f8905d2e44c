// Notifications against a real SMTP server on loopback: delivery, TLS, authentication, and
// every way a relay can fail. Whatever the relay does, the job's exit status is unchanged,
// gpualert returns within its deadline, and the message waits in the outbox until a later
// flush delivers it with its attachments intact.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_helpers.h"

using namespace alert_test;

namespace {

struct Mail {
  nlohmann::json parsed;
  fs::path attachments;
};

Mail parse(const fs::path& eml, const fs::path& out_dir) {
  auto r = run(command({kPython, kTestDir + "/parse_mail.py", eml.string(), out_dir.string()}));
  EXPECT_EQ(r.status, 0) << r.err;
  return {nlohmann::json::parse(r.out), out_dir};
}

class Notify : public AlertFixture {
 protected:
  std::map<std::string, std::string> env(int port, const std::string& scheme = "smtp") const {
    return smtp_env(port, "owner@example.test,team@example.test", scheme);
  }
  RunResult job(const std::map<std::string, std::string>& e, std::vector<std::string> options,
                std::vector<std::string> cmd) {
    options.insert(options.begin(), {"--notify-timeout", "4"});
    return run(job_spec(e, options, cmd));
  }
  RunResult outbox(const std::map<std::string, std::string>& e, const std::string& what) const {
    RunSpec s = command({kGpualert, "outbox", what}, e);
    s.timeout_s = 60;
    return run(s);
  }
  size_t outbox_size() const { return state_entries("outbox"); }
};

const std::string kArtifact = [] {
  std::string s;
  for (int i = 0; i < 5000; ++i) s += static_cast<char>((i * 7919 + 13) % 256);
  return s;
}();

}  // namespace

TEST_F(Notify, EmailHasTextHtmlAndAttachments) {
  SmtpServer server(dir / "mail", {});
  write_file(dir / "weights.bin", kArtifact);
  auto r = job(env(server.port()), {"--attach", "weights.*"},
               {"/bin/sh", "-c",
                "echo training; echo '{\"acc\": 0.5}' > metrics.json; "
                "echo 'FileNotFoundError: data.csv'; exit 3"});
  EXPECT_EQ(r.status, 3) << r.err;
  ASSERT_EQ(server.messages().size(), 1u) << r.err;
  auto mail = parse(server.messages()[0], dir / "got");
  EXPECT_EQ(mail.parsed["content_type"], "multipart/mixed");
  EXPECT_NE(mail.parsed["subject"].get<std::string>().find("File not found"), std::string::npos);
  EXPECT_EQ(mail.parsed["to"], "owner@example.test, team@example.test");
  std::set<std::string> types;
  for (const auto& p : mail.parsed["parts"]) types.insert(p["type"].get<std::string>());
  EXPECT_TRUE(types.count("text/plain") && types.count("text/html"));
  std::string text = mail.parsed["parts"][0]["text"];
  for (const char* needle : {"exit status 3", "file_not_found", "Remedy", "line 2: FileNotFoundError",
                             "Host:", "Duration:", "GPU:", "Energy:"})
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;
  EXPECT_EQ(read_file(dir / "got/weights.bin"), kArtifact);
  EXPECT_EQ(read_file(dir / "got/metrics.json"), "{\"acc\": 0.5}\n");
  EXPECT_EQ(read_file(dir / "got/output.log"), "training\nFileNotFoundError: data.csv\n");
  auto envelope = nlohmann::json::parse(read_file(dir / "mail/001.json"));
  EXPECT_EQ(envelope["to"].size(), 2u);
  EXPECT_EQ(report()["notifications"][0]["status"], "sent");
  EXPECT_EQ(outbox_size(), 0u);
}

TEST_F(Notify, StartTlsWithAuthFromPrivateConfig) {
  SmtpServer server(dir / "mail", {"accept", "starttls", "alice:s3cret-pass", 0});
  auto [cert, key] = test_certificate();
  fs::create_directories(dir / "config/gpualert");
  write_file(dir / "config/gpualert/config.toml",
             "[smtp]\nusername = \"alice\"\npassword = \"s3cret-pass\"\ntls = \"require\"\n"
             "ca_file = \"" +
                 cert + "\"\n",
             fs::perms::owner_read | fs::perms::owner_write);
  auto e = env(server.port());
  e.erase("GPUALERT_SMTP_TLS");
  auto r = job(e, {}, {"/bin/sh", "-c", "exit 1"});
  EXPECT_EQ(r.status, 1);
  ASSERT_EQ(server.messages().size(), 1u) << r.err;
  auto envelope = nlohmann::json::parse(read_file(dir / "mail/001.json"));
  EXPECT_TRUE(envelope["auth"].get<bool>());
  EXPECT_TRUE(envelope["tls"].get<bool>());
  // The secret is nowhere in what gpualert wrote.
  for (const auto& f : fs::recursive_directory_iterator(dir / "state")) {
    if (f.is_regular_file()) {
      EXPECT_EQ(read_file(f.path()).find("s3cret-pass"), std::string::npos) << f.path();
    }
  }
  EXPECT_EQ(read_file(dir / "report.json").find("s3cret-pass"), std::string::npos);
  EXPECT_EQ((r.out + r.err).find("s3cret-pass"), std::string::npos);
}

TEST_F(Notify, ImplicitTlsSmtps) {
  SmtpServer server(dir / "mail", {"accept", "smtps", "", 0});
  auto [cert, key] = test_certificate();
  fs::create_directories(dir / "config/gpualert");
  write_file(dir / "config/gpualert/config.toml", "[smtp]\nca_file = \"" + cert + "\"\n");
  auto e = env(server.port(), "smtps");
  auto r = job(e, {}, {"/bin/true"});
  EXPECT_EQ(r.status, 0);
  ASSERT_EQ(server.messages().size(), 1u) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(read_file(dir / "mail/001.json"))["tls"].get<bool>());
}

TEST_F(Notify, WorldReadableConfigWithSecretIsRefused) {
  fs::create_directories(dir / "config/gpualert");
  write_file(dir / "config/gpualert/config.toml", "[smtp]\npassword = \"hunter2\"\n", fs::perms(0644));
  auto r = job(env(1), {}, {"/bin/sh", "-c", "touch ran"});
  EXPECT_EQ(r.status, 125);
  EXPECT_FALSE(fs::exists(dir / "ran"));
  EXPECT_NE(r.err.find("readable by group or others"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("hunter2"), std::string::npos);
}

TEST_F(Notify, ConfigCheckMasksSecrets) {
  fs::create_directories(dir / "config/gpualert");
  write_file(dir / "config/gpualert/config.toml",
             "[smtp]\nurl = \"smtps://mail.example.test:465\"\nto = [\"a@b.test\"]\n"
             "username = \"bob\"\npassword = \"hunter2\"\n[run]\ngrace = \"45s\"\n",
             fs::perms(0600));
  auto r = run(command({kGpualert, "config", "check"}, env(1)));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("hunter2"), std::string::npos);
  EXPECT_NE(r.out.find("password = ****"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("grace = \"45s\""), std::string::npos) << r.out;
  // The environment overrides the file.
  auto e = env(1);
  e["GPUALERT_SMTP_URL"] = "smtp://relay.from-env.test:25";
  r = run(command({kGpualert, "config", "check"}, e));
  EXPECT_NE(r.out.find("url = \"smtp://relay.from-env.test:25\""), std::string::npos) << r.out;
  write_file(dir / "config/gpualert/config.toml", "[smtp]\nurll = \"x\"\n", fs::perms(0600));
  r = run(command({kGpualert, "config", "check"}, env(1)));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("smtp.urll: unknown key"), std::string::npos) << r.err;
}

// Each failure: exit status kept, bounded time, message queued, then a later flush to a
// working relay on the same address delivers it with its attachments byte for byte.
struct Failure {
  std::string name;
  SmtpOptions broken;  // mode "" means nothing listens (relay down)
  SmtpOptions fixed;
  std::string user;
};

void PrintTo(const Failure& f, std::ostream* os) { *os << f.name; }

class RelayFailure : public Notify, public ::testing::WithParamInterface<Failure> {};

TEST_P(RelayFailure, QueuedThenDeliveredByFlush) {
  const Failure& f = GetParam();
  int port = free_port();
  auto e = env(port);
  if (!f.user.empty()) {
    e["GPUALERT_SMTP_TLS"] = "insecure";  // a login in clear text must be allowed explicitly
    e["GPUALERT_SMTP_USER"] = f.user;
    e["GPUALERT_SMTP_PASSWORD"] = "right-password";
  }
  write_file(dir / "model.ckpt", kArtifact);
  RunResult r;
  {
    std::optional<SmtpServer> broken;
    SmtpOptions b = f.broken;
    b.port = port;
    if (!b.mode.empty()) broken.emplace(dir / "broken-mail", b);
    r = job(e, {"--attach", "model.ckpt"}, {"/bin/sh", "-c", "echo 'CUDA out of memory'; exit 2"});
  }
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_LT(r.seconds, 4 + 3) << "the notify deadline is 4 s";
  EXPECT_EQ(outbox_size(), 1u);
  auto rep = report();
  EXPECT_EQ(rep["class"], "cuda_oom");
  EXPECT_EQ(rep["notifications"][0]["status"], "queued");
  auto listed = outbox(e, "list");
  EXPECT_NE(listed.out.find("CUDA out of memory"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("attempts 1"), std::string::npos) << listed.out;

  SmtpOptions fx = f.fixed;
  fx.port = port;
  SmtpServer good(dir / "mail", fx);
  auto flushed = outbox(e, "flush");
  EXPECT_EQ(flushed.status, 0) << flushed.out << flushed.err;
  ASSERT_EQ(good.messages().size(), 1u) << flushed.out << flushed.err;
  EXPECT_EQ(outbox_size(), 0u);
  auto mail = parse(good.messages()[0], dir / "got");
  EXPECT_EQ(read_file(dir / "got/model.ckpt"), kArtifact);
  EXPECT_EQ(read_file(dir / "got/output.log"), "CUDA out of memory\n");
}

INSTANTIATE_TEST_SUITE_P(
    Relay, RelayFailure,
    ::testing::Values(Failure{"relay_down", {"", "none", "", 0}, {"accept", "none", "", 0}, ""},
                      Failure{"never_answers", {"blackhole", "none", "", 0}, {"accept", "none", "", 0}, ""},
                      Failure{"auth_rejected",
                              {"reject-auth", "none", "", 0},
                              {"accept", "none", "carol:right-password", 0},
                              "carol"}),
    [](const auto& info) { return info.param.name; });

// One recipient refused with a 5xx while another accepts: the accepting one gets the mail at
// once, the refused one is given up (retrying a 550 will not help) and reported, and nothing
// is left in the outbox to be sent twice.
TEST_F(Notify, RefusedRecipientIsGivenUpWhileTheOthersGetTheMail) {
  SmtpServer server(dir / "mail", {"reject-rcpt", "none", "", 0});
  auto e = env(server.port());
  e["GPUALERT_TO"] = "owner@example.test,reject-me@example.test";
  auto r = job(e, {}, {"/bin/sh", "-c", "echo 'CUDA out of memory'; exit 2"});
  EXPECT_EQ(r.status, 2) << r.err;
  ASSERT_EQ(server.messages().size(), 1u) << r.err;
  auto envelope = nlohmann::json::parse(read_file(fs::path(server.messages()[0]).replace_extension(".json")));
  EXPECT_EQ(envelope["to"], nlohmann::json::array({"owner@example.test"}));
  EXPECT_EQ(outbox_size(), 0u) << "nothing left to retry";
  auto rep = report();
  EXPECT_EQ(rep["notifications"][0]["status"], "sent") << rep.dump(2);
  std::string detail = rep["notifications"][0]["detail"];
  EXPECT_NE(detail.find("reject-me@example.test"), std::string::npos) << detail;
  auto listed = outbox(e, "list");
  EXPECT_NE(listed.out.find("given up"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("reject-me@example.test"), std::string::npos) << listed.out;
  EXPECT_EQ(listed.out.find("owner@example.test"), std::string::npos)
      << "only the refused recipient is reported as given up: " << listed.out;
  // A later flush sends nothing more.
  auto flushed = outbox(e, "flush");
  EXPECT_EQ(flushed.status, 0) << flushed.out << flushed.err;
  EXPECT_EQ(server.messages().size(), 1u);
}

// Exit statuses survive whether the notification is delivered or not.
TEST_F(Notify, ExitStatusesWithNotificationSucceedingAndFailing) {
  const std::vector<std::pair<std::string, int>> cases = {
      {"exit 0", 0},          {"exit 1", 1},          {"exit 2", 2},          {"exit 3", 3},         {"exit 127", 127},
      {"kill -SEGV $$", 139}, {"kill -ABRT $$", 134}, {"kill -KILL $$", 137}, {"kill -TERM $$", 143}};
  SmtpServer server(dir / "mail", {});
  size_t delivered = 0;
  for (const auto& [cmd, expected] : cases) {
    auto ok = job(env(server.port()), {}, {"/bin/sh", "-c", cmd});
    EXPECT_EQ(ok.status, expected) << cmd << " (relay up)";
    EXPECT_EQ(server.messages().size(), ++delivered) << cmd;
    auto down = job(env(free_port()), {}, {"/bin/sh", "-c", cmd});
    EXPECT_EQ(down.status, expected) << cmd << " (relay down)";
    EXPECT_EQ(report()["notifications"][0]["status"], "queued") << cmd;
  }
  EXPECT_EQ(outbox_size(), cases.size());
}

TEST_F(Notify, NextRunRetriesTheOutbox) {
  int port = free_port();
  auto r1 = job(env(port), {}, {"/bin/sh", "-c", "exit 4"});
  EXPECT_EQ(r1.status, 4);
  EXPECT_EQ(outbox_size(), 1u);
  SmtpServer server(dir / "mail", {"accept", "none", "", port});
  auto r2 = job(env(port), {}, {"/bin/true"});
  EXPECT_EQ(r2.status, 0);
  EXPECT_EQ(server.messages().size(), 2u) << "the new message and the one left by the first run";
  EXPECT_EQ(outbox_size(), 0u);
}

TEST_F(Notify, HangNotificationWhileTheJobContinues) {
  SmtpServer server(dir / "mail", {});
  auto r = job(env(server.port()), {"--hang-after", "0.5"}, {"/bin/sh", "-c", "echo started; sleep 2; echo finished"});
  EXPECT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(server.messages().size(), 2u) << r.err;
  std::vector<std::string> subjects;
  for (size_t i = 0; i < 2; ++i)
    subjects.push_back(parse(server.messages()[i], dir / ("m" + std::to_string(i))).parsed["subject"]);
  EXPECT_NE(subjects[0].find("HANG"), std::string::npos) << subjects[0];
  EXPECT_NE(subjects[1].find("OK"), std::string::npos) << subjects[1];
  EXPECT_EQ(report()["class"], "success");
}

TEST_F(Notify, DryRunPrintsInsteadOfSending) {
  SmtpServer server(dir / "mail", {});
  auto r = job(env(server.port()), {"--dry-run"}, {"/bin/sh", "-c", "exit 5"});
  EXPECT_EQ(r.status, 5);
  EXPECT_NE(r.out.find("Subject: [gpualert] FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Content-Type: multipart/alternative"), std::string::npos);
  EXPECT_EQ(server.messages().size(), 0u);
  EXPECT_EQ(outbox_size(), 0u);
}

TEST_F(Notify, NoNotifySendsNothing) {
  SmtpServer server(dir / "mail", {});
  auto r = job(env(server.port()), {"--no-notify"}, {"/bin/sh", "-c", "exit 6"});
  EXPECT_EQ(r.status, 6);
  EXPECT_EQ(server.messages().size(), 0u);
  EXPECT_EQ(report()["notifications"][0]["status"], "disabled");
}

TEST_F(Notify, WebhookAndNtfy) {
  fs::path hooks = dir / "hooks";
  int port = free_port();
  auto e = env(1);
  e.erase("GPUALERT_SMTP_URL");
  e["GPUALERT_WEBHOOK_TOKEN"] = "tok-123";
  std::string base = "http://127.0.0.1:" + std::to_string(port);
  std::vector<std::string> opts = {"--webhook", base + "/hook", "--ntfy", base + "/jobs-topic"};
  {
    // A failing endpoint first: both messages wait in the outbox.
    PythonServer failing("http_server.py", {"--dir", hooks.string(), "--port", std::to_string(port), "--status", "500"},
                         dir / "http.port");
    auto r = job(e, opts, {"/bin/sh", "-c", "echo 'ModuleNotFoundError: No module named apex'; exit 1"});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(outbox_size(), 2u);
  }
  PythonServer ok("http_server.py", {"--dir", hooks.string(), "--port", std::to_string(port)}, dir / "http.port");
  auto flushed = outbox(e, "flush");
  EXPECT_EQ(flushed.status, 0) << flushed.out << flushed.err;
  auto requests = files_with_extension(hooks, ".json");
  ASSERT_EQ(requests.size(), 2u);
  std::map<std::string, nlohmann::json> by_path;
  for (const auto& f : requests) {
    auto j = nlohmann::json::parse(read_file(f));
    by_path[j["path"]] = j;
  }
  auto hook = by_path.at("/hook");
  auto body = nlohmann::json::parse(hook["body"].get<std::string>());
  EXPECT_NE(body["text"].get<std::string>().find("Missing module"), std::string::npos) << body.dump();
  EXPECT_EQ(body["gpualert"]["class"], "missing_module");
  EXPECT_EQ(body["gpualert"]["exit_status"], 1);
  EXPECT_EQ(hook["headers"]["Authorization"], "Bearer tok-123");
  auto ntfy = by_path.at("/jobs-topic");
  EXPECT_NE(ntfy["headers"]["Title"].get<std::string>().find("FAILED"), std::string::npos);
  EXPECT_EQ(ntfy["headers"]["Priority"], "high");
  EXPECT_NE(ntfy["body"].get<std::string>().find("Remedy:"), std::string::npos);
}

// A scheduler signals every process of a job; a SIGTERM that reaches gpualert while it is
// still reporting must not replace the child's exit status.
TEST_F(Notify, LateSigtermDuringDeliveryKeepsTheExitStatus) {
  SmtpServer blackhole(dir / "mail", {"blackhole", "none", "", 0});
  RunSpec s;
  s.argv = {kGpualert, "--notify-timeout", "3", "--", "/bin/sh", "-c", "exit 7"};
  s.env = env(blackhole.port());
  s.cwd = dir.path().string();
  auto c = spawn(s);
  // The message reaches the outbox just before delivery starts: signal during delivery.
  for (int i = 0; i < 1000 && outbox_size() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(c.pid, SIGTERM);
  auto r = finish(c, "", 30);
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_LT(r.seconds, 6);
  EXPECT_EQ(outbox_size(), 1u);
}
