// Handing a job's notifications to the sender: every message is first stored in the outbox
// and delivered by gpualert-send under a hard deadline; a message the outbox cannot store
// (disk full, a file size limit) goes to the sender through a pipe instead, sent once.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "alert/attachments.h"
#include "alert/config.h"
#include "alert/redact.h"
#include "alert/report.h"

namespace meganeura::alert {

// A message the outbox could not store, to be sent directly.
struct Unqueued {
  size_t notification;  // index in report.notifications
  nlohmann::json meta;
  std::string payload;
};

// Builds and stores (or, with `dry_run`, prints) the messages for one report, recording each
// channel's status in it. Returns the outbox ids. Messages that cannot be stored are
// appended to `unqueued` (when given).
std::vector<std::string> enqueue(const Config& c, Report& report, const AttachmentPlan* plan, bool dry_run,
                                 const Redactor& redactor, std::vector<Unqueued>* unqueued);

// Updates the statuses of the queued notifications from what is left in the outbox after a
// delivery described by `delivery`.
void settle_statuses(const Config& c, Report& report, const std::vector<std::string>& ids, const std::string& delivery);

// Sends the unqueued messages directly (one sender each, started now), runs `deliver_queued`
// meanwhile, then waits for the direct senders until `deadline_s` after the start and
// records how each ended.
void deliver_unqueued(const std::string& sender_exe, const std::optional<std::filesystem::path>& config_path,
                      double deadline_s, Report& report, const std::vector<Unqueued>& unqueued,
                      const std::function<void()>& deliver_queued);

}  // namespace meganeura::alert
