// Delivery of outbox entries with libcurl: SMTP (SMTPS or STARTTLS, optional auth, several
// recipients) and HTTP POST (generic JSON webhook, ntfy). Only the separate sender program
// links this, so the wrapper itself starts without loading libcurl and its TLS stack.
#pragma once

#include <string>
#include <vector>

#include "alert/config.h"
#include "alert/outbox.h"

namespace meganeura::alert {

struct FlushOptions {
  double timeout_s = 30;          // for the whole flush; each entry gets what is left
  std::vector<std::string> only;  // entry ids to send first (others follow if time allows)
  bool only_these = false;        // send nothing but `only`
};

struct FlushResult {
  int sent = 0;
  int failed = 0;
  int busy = 0;  // being sent by another process right now
  std::vector<std::string> messages;  // one line per entry
};

// Sends one entry. Returns an empty string on success, else a one-line error.
// Secrets (SMTP password, webhook token) are taken from `config`, never from the entry.
std::string send_entry(const nlohmann::json& meta, const std::string& payload,
                       const Config& config, double timeout_s);

FlushResult flush_outbox(const Outbox& outbox, const Config& config, const FlushOptions& options);

}  // namespace meganeura::alert
