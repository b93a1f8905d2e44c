// gpualert's credentials against a hostile job, a hostile network and a hostile local user:
// the job never sees them, each channel gets only its own, a login never travels in clear
// text, a planted outbox entry never receives one, and what the user marks with --redact
// never leaves the machine. Real binaries, real servers on loopback.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_helpers.h"

using namespace alert_test;

namespace {

class Secrets : public AlertFixture {
 protected:
  std::map<std::string, std::string> env(int smtp_port) const { return smtp_env(smtp_port); }
  RunResult job(const std::map<std::string, std::string>& e, std::vector<std::string> options,
                std::vector<std::string> cmd) {
    options.insert(options.begin(), {"--notify-timeout", "5"});
    return run(job_spec(e, options, cmd));
  }
  // Every file under `root`, concatenated: what a leak check searches.
  static std::string all_files(const fs::path& root) {
    std::string all;
    std::error_code ec;
    for (const auto& f : fs::recursive_directory_iterator(root, ec))
      if (f.is_regular_file()) all += read_file(f.path()) + "\n";
    return all;
  }
  size_t outbox_size() const { return state_entries("outbox"); }
};

}  // namespace

// A job that prints its environment: no credential reaches its output, its log, the
// report, the email or the webhook.
TEST_F(Secrets, JobNeverSeesGpualertCredentials) {
  SmtpServer smtp(dir / "mail", {});
  PythonServer http("http_server.py", {"--dir", (dir / "hooks").string()}, dir / "http.port");
  auto e = env(smtp.port());
  e["GPUALERT_SMTP_PASSWORD"] = "pw-LEAKME-1";
  e["GPUALERT_WEBHOOK_TOKEN"] = "tok-LEAKME-2";
  e["GPUALERT_NTFY_TOKEN"] = "ntfy-LEAKME-3";
  e["GPUALERT_WEBHOOK_URL"] = "http://127.0.0.1:" + std::to_string(http.port()) + "/hook-LEAKME-4";
  auto r = job(e, {}, {"/bin/sh", "-c", "env; echo done-env; exit 1"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.out.find("done-env"), std::string::npos);
  EXPECT_NE(r.out.find("XDG_STATE_HOME="), std::string::npos) << "other variables are kept";
  ASSERT_EQ(smtp.messages().size(), 1u) << r.err;
  ASSERT_EQ(files_with_extension(dir / "hooks", ".json").size(), 1u) << r.err;
  std::string everything =
      r.out + r.err + all_files(dir / "state") + all_files(dir / "mail") + read_file(dir / "report.json");
  for (const auto& f : files_with_extension(dir / "hooks", ".json"))
    everything += nlohmann::json::parse(read_file(f))["body"].get<std::string>();
  EXPECT_EQ(everything.find("LEAKME"), std::string::npos)
      << everything.substr(std::min(everything.size(), everything.find("LEAKME")) / 2);
}

// The ntfy token goes to ntfy only, the webhook token to the webhook only.
TEST_F(Secrets, EachHttpChannelGetsOnlyItsOwnToken) {
  PythonServer http("http_server.py", {"--dir", (dir / "hooks").string()}, dir / "http.port");
  auto e = env(1);
  e.erase("GPUALERT_SMTP_URL");
  e["GPUALERT_WEBHOOK_TOKEN"] = "tok-webhook";
  e["GPUALERT_NTFY_TOKEN"] = "tok-ntfy";
  std::string base = "http://127.0.0.1:" + std::to_string(http.port());
  auto r = job(e, {"--webhook", base + "/hook", "--ntfy", base + "/topic"}, {"/bin/sh", "-c", "exit 1"});
  EXPECT_EQ(r.status, 1);
  std::map<std::string, nlohmann::json> by_path;
  for (const auto& f : files_with_extension(dir / "hooks", ".json")) {
    auto j = nlohmann::json::parse(read_file(f));
    by_path[j["path"]] = j["headers"];
  }
  ASSERT_EQ(by_path.size(), 2u) << r.err;
  EXPECT_EQ(by_path["/hook"].value("Authorization", ""), "Bearer tok-webhook");
  EXPECT_EQ(by_path["/topic"].value("Authorization", ""), "Bearer tok-ntfy");
}

// A relay without STARTTLS (or a network that strips it): with tls = "auto" or "none" the
// login is never sent in clear; the message waits in the outbox with the reason.
TEST_F(Secrets, LoginNeverTravelsInClearText) {
  SmtpServer smtp(dir / "mail", {"accept", "none", "alice:pw-clear", 0});
  for (const char* tls : {"auto", "none"}) {
    auto e = env(smtp.port());
    e["GPUALERT_SMTP_TLS"] = tls;
    e["GPUALERT_SMTP_USER"] = "alice";
    e["GPUALERT_SMTP_PASSWORD"] = "pw-clear";
    auto r = job(e, {}, {"/bin/sh", "-c", "exit 1"});
    EXPECT_EQ(r.status, 1) << tls;
    EXPECT_EQ(smtp.messages().size(), 0u) << "tls = " << tls << ": logged in without TLS";
    auto rep = report();
    EXPECT_EQ(rep["notifications"][0]["status"], "queued") << tls;
  }
  EXPECT_EQ(outbox_size(), 2u);
  // Clear text only when the config says so.
  auto e = env(smtp.port());
  e["GPUALERT_SMTP_TLS"] = "insecure";
  e["GPUALERT_SMTP_USER"] = "alice";
  e["GPUALERT_SMTP_PASSWORD"] = "pw-clear";
  auto r = job(e, {}, {"/bin/sh", "-c", "exit 1"});
  EXPECT_EQ(r.status, 1);
  EXPECT_GE(smtp.messages().size(), 1u) << r.err;
}

// An outbox entry that gpualert did not queue (another destination, no signature) is
// refused, so the webhook token never reaches it; the genuine one is delivered.
TEST_F(Secrets, PlantedOutboxEntryNeverReceivesTheToken) {
  PythonServer good("http_server.py", {"--dir", (dir / "good").string()}, dir / "good.port");
  PythonServer evil("http_server.py", {"--dir", (dir / "evil").string()}, dir / "evil.port");
  auto e = env(1);
  e.erase("GPUALERT_SMTP_URL");
  e["GPUALERT_WEBHOOK_TOKEN"] = "tok-precious";
  std::string good_url = "http://127.0.0.1:" + std::to_string(good.port()) + "/hook";
  e["GPUALERT_WEBHOOK_URL"] = good_url;
  // A genuine entry, kept in the outbox by a relay that is down.
  {
    auto down = e;
    down["GPUALERT_WEBHOOK_URL"] = "http://127.0.0.1:" + std::to_string(free_port()) + "/hook";
    auto r = job(down, {}, {"/bin/sh", "-c", "exit 1"});
    EXPECT_EQ(r.status, 1);
  }
  ASSERT_EQ(outbox_size(), 1u);
  // The planted one.
  fs::path planted = dir / "state/gpualert/outbox/0000000001.000000-aaaaaa";
  fs::create_directories(planted);
  write_file(planted / "payload", "{\"text\": \"planted\"}");
  write_file(planted / "meta.json",
             nlohmann::json{{"channel", "webhook"},
                            {"url", "http://127.0.0.1:" + std::to_string(evil.port()) + "/steal"},
                            {"attempts", 0}}
                 .dump());
  RunSpec s = command({kGpualert, "outbox", "flush", "--timeout", "10"}, e);
  auto r = run(s);
  EXPECT_TRUE(files_with_extension(dir / "evil", ".json").empty()) << "the token went to a planted URL";
  EXPECT_NE(r.out.find("not signed"), std::string::npos) << r.out << r.err;
  // The genuine entry was queued for the address that was down; it is still delivered there
  // only if that address answers, so here it stays: nothing reached the planted URL either way.
  auto listed = run(command({kGpualert, "outbox", "list"}, e));
  EXPECT_NE(listed.out.find("refused"), std::string::npos) << listed.out;
}

// A state directory that another user could write to is refused, and the job does not
// start: its outbox could hold planted messages.
TEST_F(Secrets, OpenStateDirectoryIsRefused) {
  fs::create_directories(dir / "state/gpualert");
  fs::permissions(dir / "state/gpualert", fs::perms(0777));
  auto r = job(env(1), {"--no-notify"}, {"/bin/sh", "-c", "touch ran"});
  EXPECT_EQ(r.status, 125);
  EXPECT_FALSE(fs::exists(dir / "ran"));
  EXPECT_NE(r.err.find("mode 777"), std::string::npos) << r.err;
  // Still refused by outbox commands.
  auto listed = run(command({kGpualert, "outbox", "list"}, env(1)));
  EXPECT_NE(listed.status, 0);
  if (geteuid() == 0) {
    // Owned by someone else (possible to set up only as root).
    fs::permissions(dir / "state/gpualert", fs::perms(0700));
    ASSERT_EQ(chown((dir / "state/gpualert").c_str(), 65534, 65534), 0);
    r = job(env(1), {"--no-notify"}, {"/bin/sh", "-c", "touch ran"});
    EXPECT_EQ(r.status, 125);
    EXPECT_NE(r.err.find("belongs to uid 65534"), std::string::npos) << r.err;
  } else {
    std::fprintf(stderr, "skipping the foreign-owner case: needs root to chown\n");
  }
}

// A Slack-style webhook URL is a credential: masked in `config check` and `outbox list`,
// and a config holding one must be private.
TEST_F(Secrets, WebhookUrlsAreMaskedAndNeedAPrivateConfig) {
  fs::create_directories(dir / "config/gpualert");
  const std::string hook = "https://hooks.example.test/services/T0/B0/SECRETPATH";
  write_file(dir / "config/gpualert/config.toml", "[webhook]\nurl = \"" + hook + "\"\n", fs::perms(0644));
  auto e = env(1);
  e.erase("GPUALERT_SMTP_URL");
  auto r = run(command({kGpualert, "config", "check"}, e));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("readable by group or others"), std::string::npos) << r.err;
  fs::permissions(dir / "config/gpualert/config.toml", fs::perms(0600));
  r = run(command({kGpualert, "config", "check"}, e));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("SECRETPATH"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("https://hooks.example.test/****"), std::string::npos) << r.out;
  // Unreachable, so the message stays in the outbox and is listed.
  e["GPUALERT_WEBHOOK_URL"] = "http://127.0.0.1:" + std::to_string(free_port()) + "/T0/SECRETPATH";
  job(e, {"--notify-timeout", "2"}, {"/bin/sh", "-c", "exit 1"});
  auto listed = run(command({kGpualert, "outbox", "list"}, e));
  EXPECT_NE(listed.out.find("webhook"), std::string::npos) << listed.out;
  EXPECT_EQ(listed.out.find("SECRETPATH"), std::string::npos) << listed.out;
  EXPECT_EQ(read_file(dir / "report.json").find("SECRETPATH"), std::string::npos);
}

// --redact masks a pattern in the email text, the attached log and default outputs; the
// local log keeps what the job wrote.
TEST_F(Secrets, RedactMasksEverythingSent) {
  SmtpServer smtp(dir / "mail", {});
  auto r = job(env(smtp.port()), {"--redact", "hf_[A-Za-z0-9]+"},
               {"/bin/sh", "-c",
                "echo 'token hf_AbC123xyz loaded'; echo 'hf_AbC123xyz' > notes.txt; "
                "echo 'KeyError: hf_AbC123xyz'; exit 1"});
  EXPECT_EQ(r.status, 1) << r.err;
  ASSERT_EQ(smtp.messages().size(), 1u) << r.err;
  auto parsed =
      run(command({kPython, kTestDir + "/parse_mail.py", smtp.messages()[0].string(), (dir / "got").string()}));
  ASSERT_EQ(parsed.status, 0) << parsed.err;
  std::string sent = parsed.out + all_files(dir / "got");
  EXPECT_EQ(sent.find("AbC123xyz"), std::string::npos) << sent;
  EXPECT_NE(sent.find("token [redacted] loaded"), std::string::npos) << sent;
  EXPECT_NE(read_file(dir / "got/notes.txt").find("[redacted]"), std::string::npos);
  // Kept locally.
  EXPECT_NE(all_files(dir / "state/gpualert/jobs").find("hf_AbC123xyz"), std::string::npos);
  // A bad pattern is a usage error: named, and the job does not start.
  r = job(env(smtp.port()), {"--redact", "(unclosed"}, {"/bin/sh", "-c", "touch ran"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("(unclosed"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "ran"));
}
