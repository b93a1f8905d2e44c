// The job's durable record: its directory (mode 700) and output log.
//
// The directory and the log header are created and fsynced before the child runs, so a
// job that cannot be recorded never starts. Output is written to the file as it arrives
// (a SIGKILL of the wrapper loses nothing already read) and synced periodically.
// Carriage returns are applied as a terminal would: a progress bar that redraws its line
// leaves only its last state in the log. ANSI escape sequences are dropped from the log
// (they still reach the terminal untouched).
#pragma once

#include <cstdint>
#include <ctime>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace meganeura::alert {

// First line of every log; the classifier skips everything up to kBodyMarker.
inline constexpr std::string_view kLogMagic = "# gpualert job ";
inline constexpr std::string_view kBodyMarker = "# ---- output ----";

struct LogHeader {
  std::string job_id;
  std::string command;
  std::string host;
  std::string cwd;
  std::string start_time;  // ISO 8601
};

class LogStore {
 public:
  // Creates `job_dir` (and parents) with mode 700 and `job_dir/output.log` with the header,
  // then fsyncs both. Throws std::runtime_error naming the path and errno on failure.
  LogStore(const std::filesystem::path& job_dir, const LogHeader& header);
  ~LogStore();
  LogStore(const LogStore&) = delete;
  LogStore& operator=(const LogStore&) = delete;

  // Never throws once constructed: a write error (disk full, file size limit) stops the
  // file where it is, and later output is kept in memory (the last kMemoryTail bytes of
  // complete lines) so the report can still show and classify the end of the job.
  void append(std::string_view bytes);
  // fdatasync when something was written since the last sync.
  void sync();
  // Ends a pending partial line and fsyncs; idempotent.
  void finish();

  const std::filesystem::path& path() const { return path_; }
  bool incomplete() const { return !error_.empty(); }
  // Why and where the file stopped ("" when complete).
  const std::string& error() const { return error_; }
  // Complete lines seen after the file stopped, at most kMemoryTail bytes (the latest).
  std::string memory_tail() const;
  static constexpr size_t kMemoryTail = 256 * 1024;
  // The latest complete lines whether or not the file could be written: at most
  // kMemoryTail bytes, so the end of the job can be shown and classified without the file.
  std::string recent_output() const;
  std::vector<std::string> last_lines(size_t count) const;
  uint64_t body_offset() const { return body_offset_; }
  uint64_t bytes_written() const { return line_start_ + line_.size(); }
  // The log's mtime right after its header was written, before the job started: the
  // reference for "files the job wrote", read from the kernel's file-timestamp clock.
  const timespec& created_mtime() const { return created_mtime_; }

 private:
  void put(char c);
  void flush_line(bool newline);
  // pwrite/ftruncate/fsync that record the first error instead of throwing.
  bool io(bool ok, const char* what);
  void write_at(const char* data, size_t size, uint64_t offset);

  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t body_offset_ = 0;
  timespec created_mtime_{};
  uint64_t line_start_ = 0;  // file offset where the current (unterminated) line begins
  std::string line_;         // current line as a terminal would show it
  size_t cursor_ = 0;        // column of the next character within line_
  size_t dirty_from_ = 0;    // first byte of line_ not yet written to the file
  size_t written_len_ = 0;   // bytes of line_ currently in the file
  int escape_state_ = 0;     // 0 none, 1 after ESC, 2 inside CSI, 3 inside OSC
  bool dirty_ = false;
  bool finished_ = false;
  std::string error_;
  std::string tail_;         // complete lines after the file stopped (bounded)
  uint64_t lost_bytes_ = 0;  // bytes of complete lines dropped from tail_
  std::string recent_;       // the latest complete lines (bounded)
};

// Splits a log file into the child's output, skipping gpualert's own header when present.
// Returns the byte offset where the child's output begins (0 for foreign files).
uint64_t find_body_offset(const std::filesystem::path& log);

}  // namespace meganeura::alert
