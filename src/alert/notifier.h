// Delivery of outbox entries with libcurl: SMTP (SMTPS or STARTTLS, optional auth, several
// recipients) and HTTP POST (generic JSON webhook, ntfy). Only the separate sender program
// links this, so the wrapper itself starts without loading libcurl and its TLS stack.
#pragma once

#include <string>
#include <vector>

#include "alert/config.h"
#include "alert/outbox.h"

namespace meganeura::alert {

// Entries for different destinations are sent in parallel, each destination's in order, so a
// relay that never answers holds up only its own messages.
struct FlushOptions {
  double timeout_s = 30;          // for the whole flush
  std::vector<std::string> only;  // entry ids to send first (others follow if time allows)
  bool only_these = false;        // send nothing but `only`
};

struct FlushResult {
  int sent = 0;
  int failed = 0;
  int busy = 0;  // being sent by another process right now
  int given_up = 0;
  std::vector<std::string> messages;  // one line per entry
};

struct Delivery {
  Delivery() = default;
  Delivery(std::string e, bool perm = false) : error(std::move(e)), permanent(perm) {}
  std::string error;                  // empty: delivered (to at least one recipient)
  bool permanent = false;             // the server refused for good (5xx, HTTP 4xx): retrying will not help
  std::vector<std::string> rejected;  // email recipients refused while others accepted
};

// Sends one entry. Secrets (SMTP password, webhook token) are taken from `config`, never
// from the entry.
Delivery send_entry(const nlohmann::json& meta, const std::string& payload, const Config& config, double timeout_s);

// An entry is given up (moved to <state>/given-up/ with the reason, and reported) after
// kMaxPermanentAttempts permanent refusals, or kMaxAttempts attempts, or kMaxAgeS seconds.
inline constexpr int kMaxPermanentAttempts = 3;
inline constexpr int kMaxAttempts = 100;
inline constexpr double kMaxAgeS = 7 * 24 * 3600;

FlushResult flush_outbox(const Outbox& outbox, const Config& config, const FlushOptions& options);

}  // namespace meganeura::alert
