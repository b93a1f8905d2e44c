// The final account of one job: what ran, how it ended, why, what it consumed, and what
// was sent. Rendered as JSON (--json-report), plain text and HTML (the email bodies).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "alert/classifier.h"
#include "alert/telemetry.h"

namespace meganeura::alert {

struct AttachedFile {
  std::string source;  // path on disk
  std::string name;    // file name in the message
  uint64_t original_size = 0;
  uint64_t attached_size = 0;  // bytes in the message before base64
  bool truncated = false;      // head + tail kept, middle cut
  bool compressed = false;
};

struct SkippedFile {
  std::string path;
  uint64_t size = 0;
  std::string reason;
};

struct NotificationStatus {
  std::string channel;  // "email", "webhook", "ntfy"
  std::string status;   // "sent", "queued", "dry-run", "disabled"
  std::string detail;
};

struct Report {
  std::string kind = "final";  // "final" or "hang"
  std::string job_id;
  std::vector<std::string> argv;
  std::string command;
  std::string host;
  std::string cwd;
  std::string job_dir;
  std::string log_path;
  double start_time = 0;
  double end_time = 0;
  int exit_status = 0;
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::optional<int> received_signal;
  bool timed_out = false;
  bool hang_detected = false;
  Classification classification;
  std::vector<std::string> last_lines;
  std::map<std::string, std::string> slurm;
  TelemetryResult telemetry;
  std::vector<AttachedFile> attachments;
  std::vector<SkippedFile> skipped;
  std::vector<NotificationStatus> notifications;
  std::vector<std::string> notes;  // what the report cannot vouch for (an incomplete log, ...)
};

nlohmann::json to_json(const Report& report);
std::string subject_line(const Report& report);
std::string render_text(const Report& report);
std::string render_html(const Report& report);
// Short text for chat webhooks and ntfy.
std::string render_short(const Report& report);

// SLURM_JOB_ID, SLURM_JOB_NAME, SLURM_JOB_NODELIST, SLURM_ARRAY_TASK_ID, ... when set.
std::map<std::string, std::string> slurm_environment();

// The last `count` lines of the child's output (after the header).
std::vector<std::string> tail_lines(const std::string& log_path, uint64_t body_offset, size_t count);

}  // namespace meganeura::alert
