// Choosing and shrinking what goes into a notification.
//
// The job's log is always attached; artifacts come from --attach globs and, by default,
// from output-like files in the working directory written during the job. Text over the
// per-file budget is cut to head + tail with a marker saying what was cut; anything large
// is gzip-compressed. Whatever cannot be attached is reported with its size, path and the
// reason, never dropped silently.
#pragma once

#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "alert/config.h"
#include "alert/redact.h"
#include "alert/report.h"

namespace meganeura::alert {

struct AttachmentBlob {
  std::string name;
  std::string content_type;
  std::string data;
};

struct AttachmentPlan {
  std::vector<AttachmentBlob> blobs;
  std::vector<AttachedFile> attached;
  std::vector<SkippedFile> skipped;
};

struct AttachRequest {
  std::filesystem::path log_path;
  uint64_t log_body_offset = 0;
  // Default outputs must be modified at or after this time. It is the mtime of a file the
  // wrapper wrote before launching the job, so it comes from the same (coarse) kernel clock
  // as the job's own files' mtimes; a wall-clock reading could be a tick ahead of them.
  timespec start_reference{};
  std::filesystem::path cwd;
  std::filesystem::path job_dir;     // never scanned for artifacts
  const Redactor* redact = nullptr;  // masks text attachments before compression
};

AttachmentPlan collect_attachments(const AttachConfig& config, const AttachRequest& request);

// gzip (RFC 1952) of `data` at the default level.
std::string gzip_compress(std::string_view data);

// Reads at most `budget` bytes of `path`: the whole file when it fits, else its first and
// last parts around a line saying how many bytes were cut.
std::string read_head_tail(const std::filesystem::path& path, uint64_t offset, uint64_t budget, bool& truncated);

}  // namespace meganeura::alert
