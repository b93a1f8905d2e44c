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
  // auto: STARTTLS if offered, required when there is a login; require; none: never TLS,
  // and then no login; insecure: no TLS, login in clear text allowed. Ignored for smtps.
  std::string tls = "auto";
  std::string ca_file;    // extra CA bundle, e.g. a site's private CA
  bool insecure = false;  // skip certificate verification (test relays only)
};

struct WebhookConfig {
  std::string url;         // generic JSON POST; a Slack-style URL is itself a credential
  std::string ntfy_url;    // https://ntfy.sh/<topic> or a self-hosted server
  std::string token;       // bearer token for the webhook only (secret)
  std::string ntfy_token;  // bearer token for ntfy only (secret)
};

// Variables that carry gpualert's credentials. The job never sees them: a job that prints
// its environment would otherwise put them into the log, the report and the notification.
inline const std::vector<std::string>& secret_env_names() {
  static const std::vector<std::string> kNames = {"GPUALERT_SMTP_PASSWORD", "GPUALERT_WEBHOOK_TOKEN",
                                                  "GPUALERT_NTFY_TOKEN", "GPUALERT_WEBHOOK_URL", "GPUALERT_NTFY_URL"};
  return kNames;
}

struct AttachConfig {
  std::vector<std::string> globs;    // extra artifacts (--attach)
  bool default_outputs = true;       // files in the working directory written during the job
  uint64_t max_file = 8ull << 20;    // per attachment, after compression
  uint64_t max_total = 20ull << 20;  // all attachments of one message
};

// Defaults under Slurm (SLURM_JOB_ID set), unless the config file sets them.
inline constexpr double kSlurmGraceS = 10;
inline constexpr double kSlurmNotifyTimeoutS = 12;

struct Config {
  SmtpConfig smtp;
  WebhookConfig webhook;
  AttachConfig attach;
  std::filesystem::path state_dir;  // jobs/ and outbox/ live here
  double grace_s = 30;
  double notify_timeout_s = 30;  // hard deadline for sending at the end of a job
  bool notify_on_success = true;
  std::vector<std::string> redact;            // RE2 patterns masked in everything sent
  std::optional<std::filesystem::path> file;  // the config file actually read
  std::vector<std::string> notes;             // where each setting came from, warnings

  bool email_enabled() const { return !smtp.url.empty() && !smtp.to.empty(); }
  bool any_channel() const { return email_enabled() || !webhook.url.empty() || !webhook.ntfy_url.empty(); }
};

// Reads the file (if any) and the environment. `explicit_path` must exist when given.
// Throws std::runtime_error with a one-line message naming the file, key and problem.
Config load_config(const std::optional<std::filesystem::path>& explicit_path);

// The default config path ($XDG_CONFIG_HOME or ~/.config).
std::filesystem::path default_config_path();

// Effective settings as TOML-like text, secrets replaced by "****".
std::string describe_config(const Config& config);

}  // namespace meganeura::alert
