// gpualert settings: TOML file, then environment, then command-line flags (the tool
// applies flags on top of what load_config returns).
//
// File: $XDG_CONFIG_HOME/gpualert/config.toml (or ~/.config/...), or --config PATH.
// A file that holds a secret (smtp.password, webhook.token) is refused when it is group- or
// world-readable: a password readable by others is already leaked. Secrets can also come
// from GPUALERT_SMTP_PASSWORD / GPUALERT_WEBHOOK_TOKEN. They never reach logs or reports.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace meganeura::alert {

// Largest config file read; a larger one (or an endless one such as a device) is an error.
inline constexpr uint64_t kMaxConfigBytes = 1u << 20;

struct SmtpConfig {
  std::string url;  // smtp://host:587 (STARTTLS when offered/required), smtps://host:465
  std::string from;
  std::vector<std::string> to;
  std::string username;  // empty: no authentication (a plain relay)
  std::string password;
  std::string tls = "auto";  // auto (STARTTLS if offered), require, none; ignored for smtps
  std::string ca_file;       // extra CA bundle, e.g. a site's private CA
  bool insecure = false;     // skip certificate verification (test relays only)
};

struct WebhookConfig {
  std::string url;       // generic JSON POST; the body carries a Slack-compatible "text"
  std::string ntfy_url;  // https://ntfy.sh/<topic> or a self-hosted server
  std::string token;     // bearer token for ntfy or the webhook (secret)
};

struct AttachConfig {
  std::vector<std::string> globs;        // extra artifacts (--attach)
  bool default_outputs = true;           // files in the working directory written during the job
  uint64_t max_file = 8ull << 20;        // per attachment, after compression
  uint64_t max_total = 20ull << 20;      // all attachments of one message
};

struct Config {
  SmtpConfig smtp;
  WebhookConfig webhook;
  AttachConfig attach;
  std::filesystem::path state_dir;  // jobs/ and outbox/ live here
  double grace_s = 30;
  double notify_timeout_s = 30;     // hard deadline for sending at the end of a job
  bool notify_on_success = true;
  std::optional<std::filesystem::path> file;  // the config file actually read
  std::vector<std::string> notes;             // where each setting came from, warnings

  bool email_enabled() const { return !smtp.url.empty() && !smtp.to.empty(); }
  bool any_channel() const {
    return email_enabled() || !webhook.url.empty() || !webhook.ntfy_url.empty();
  }
};

// Reads the file (if any) and the environment. `explicit_path` must exist when given.
// Throws std::runtime_error with a one-line message naming the file, key and problem.
Config load_config(const std::optional<std::filesystem::path>& explicit_path);

// The default config path ($XDG_CONFIG_HOME or ~/.config).
std::filesystem::path default_config_path();

// Effective settings as TOML-like text, secrets replaced by "****".
std::string describe_config(const Config& config);

}  // namespace meganeura::alert
