#include "alert/log_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace meganeura::alert {
namespace {

// Long lines without a newline (binary output, huge JSON) are committed in pieces so that
// rewriting the current line stays cheap.
constexpr size_t kMaxLine = 64 * 1024;

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& p) {
  throw std::runtime_error(fmt::format("[gpualert] cannot {} '{}': {}", what, p.string(), std::strerror(errno)));
}

void make_private_dirs(const std::filesystem::path& dir) {
  std::filesystem::path partial;
  for (const auto& part : dir) {
    partial /= part;
    if (mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) fail("create directory", partial);
  }
  // The job directory itself must be private even when it already existed.
  if (chmod(dir.c_str(), 0700) != 0) fail("set mode 700 on", dir);
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail("use directory", dir);
}

void write_all(int fd, const char* data, size_t size, uint64_t offset, const std::filesystem::path& p) {
  while (size > 0) {
    ssize_t n = pwrite(fd, data, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", p);
    }
    data += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

}  // namespace

LogStore::LogStore(const std::filesystem::path& job_dir, const LogHeader& header) : path_(job_dir / "output.log") {
  make_private_dirs(job_dir);
  fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd_ < 0) fail("create log", path_);
  // The command line is one line: a newline inside an argument must not fake log lines.
  std::string command = header.command;
  for (auto& c : command)
    if (c == '\n' || c == '\r') c = ' ';
  std::string head = fmt::format("{}{}\n# command: {}\n# host: {}\n# cwd: {}\n# start: {}\n{}\n", kLogMagic,
                                 header.job_id, command, header.host, header.cwd, header.start_time, kBodyMarker);
  write_all(fd_, head.data(), head.size(), 0, path_);
  if (fsync(fd_) != 0) fail("fsync", path_);
  struct stat st {};
  if (fstat(fd_, &st) != 0) fail("stat", path_);
  created_mtime_ = st.st_mtim;
  int dfd = open(job_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail("open directory", job_dir);
  int rc = fsync(dfd);
  close(dfd);
  if (rc != 0) fail("fsync directory", job_dir);
  body_offset_ = head.size();
  line_start_ = body_offset_;
}

LogStore::~LogStore() {
  try {
    finish();
  } catch (...) {
    // Destructors must not throw; finish() already reported through the normal path.
  }
  if (fd_ >= 0) close(fd_);
}

void LogStore::put(char c) {
  if (c == '\n') {
    flush_line(true);
    return;
  }
  if (c == '\r') {
    cursor_ = 0;
    return;
  }
  if (c == '\b') {
    if (cursor_ > 0) --cursor_;
    return;
  }
  if (cursor_ < line_.size()) {
    line_[cursor_] = c;
  } else {
    line_.push_back(c);
  }
  dirty_from_ = std::min(dirty_from_, cursor_);
  ++cursor_;
  if (line_.size() >= kMaxLine) flush_line(false);
}

void LogStore::append(std::string_view bytes) {
  for (char c : bytes) {
    switch (escape_state_) {
      case 1:  // after ESC
        escape_state_ = c == '[' ? 2 : c == ']' ? 3 : 0;
        continue;
      case 2:  // CSI: parameters until a final byte in 0x40..0x7e
        if (c >= 0x40 && c <= 0x7e) {
          escape_state_ = 0;
          if (c == 'K' && cursor_ < line_.size()) {  // erase to end of line
            line_.resize(cursor_);
            dirty_from_ = std::min(dirty_from_, cursor_);
          }
        }
        continue;
      case 3:  // OSC: until BEL or ESC
        if (c == '\a')
          escape_state_ = 0;
        else if (c == '\x1b')
          escape_state_ = 1;
        continue;
      default: break;
    }
    if (c == '\x1b') {
      escape_state_ = 1;
      continue;
    }
    put(c);
  }
  // Keep the file equal to what has been seen, so a crash of the wrapper loses nothing.
  if (error_.empty() && (dirty_from_ < line_.size() || line_.size() != written_len_)) {
    size_t from = std::min(dirty_from_, line_.size());
    write_at(line_.data() + from, line_.size() - from, line_start_ + from);
    if (line_.size() < written_len_)
      io(ftruncate(fd_, static_cast<off_t>(line_start_ + line_.size())) == 0, "truncate");
    written_len_ = line_.size();
    dirty_from_ = line_.size();
    dirty_ = true;
  }
}

bool LogStore::io(bool ok, const char* what) {
  if (ok || !error_.empty()) return ok;
  error_ = fmt::format("cannot {} '{}' at byte {}: {}", what, path_.string(), line_start_ - body_offset_,
                       std::strerror(errno));
  return false;
}

void LogStore::write_at(const char* data, size_t size, uint64_t offset) {
  while (size > 0 && error_.empty()) {
    ssize_t n = pwrite(fd_, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (!io(n > 0, "write")) return;
    data += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

namespace {

// The last at most `limit` bytes of `kept`, starting at a line.
std::string latest(const std::string& kept, size_t limit) {
  if (kept.size() <= limit) return kept;
  size_t cut = kept.find('\n', kept.size() - limit);
  return cut == std::string::npos ? kept.substr(kept.size() - limit) : kept.substr(cut + 1);
}

}  // namespace

std::string LogStore::memory_tail() const { return latest(tail_, kMemoryTail); }

std::string LogStore::recent_output() const { return latest(recent_, kMemoryTail); }

std::vector<std::string> LogStore::last_lines(size_t count) const {
  std::vector<std::string> lines;
  size_t end = recent_.size();
  while (lines.size() < count && end > 0) {
    const size_t stop = recent_[end - 1] == '\n' ? end - 1 : end;  // a long line's piece has none
    const size_t nl = stop > 0 ? recent_.rfind('\n', stop - 1) : std::string::npos;
    const size_t start = nl == std::string::npos ? 0 : nl + 1;
    lines.emplace_back(recent_, start, stop - start);
    end = start;
  }
  std::reverse(lines.begin(), lines.end());
  return lines;
}

namespace {

// Appends `line` and keeps at most `limit` bytes of whole lines; the copy is cut only when
// twice the limit is reached, so keeping the tail costs a constant per byte.
void keep_latest(std::string& kept, const std::string& line, size_t limit, uint64_t* dropped) {
  kept += line;
  if (kept.size() <= 2 * limit) return;
  size_t cut = kept.find('\n', kept.size() - limit);
  cut = cut == std::string::npos ? kept.size() - limit : cut + 1;
  if (dropped != nullptr) *dropped += cut;
  kept.erase(0, cut);
}

}  // namespace

void LogStore::flush_line(bool newline) {
  if (newline) line_.push_back('\n');
  if (error_.empty()) {
    size_t from = std::min(dirty_from_, line_.size());
    write_at(line_.data() + from, line_.size() - from, line_start_ + from);
    if (line_.size() < written_len_)
      io(ftruncate(fd_, static_cast<off_t>(line_start_ + line_.size())) == 0, "truncate");
  }
  // The file may stop (disk full): the latest lines stay where the report can use them.
  if (!error_.empty()) keep_latest(tail_, line_, kMemoryTail, &lost_bytes_);
  keep_latest(recent_, line_, kMemoryTail, nullptr);
  line_start_ += line_.size();
  line_.clear();
  cursor_ = 0;
  dirty_from_ = 0;
  written_len_ = 0;
  dirty_ = true;
}

void LogStore::sync() {
  if (!dirty_ || fd_ < 0 || !error_.empty()) return;
  io(fdatasync(fd_) == 0, "fsync");
  dirty_ = false;
}

void LogStore::finish() {
  if (finished_ || fd_ < 0) return;
  finished_ = true;
  if (!line_.empty()) flush_line(true);
  if (error_.empty()) io(fsync(fd_) == 0, "fsync");
  dirty_ = false;
}

uint64_t find_body_offset(const std::filesystem::path& log) {
  std::ifstream in(log, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("[gpualert] cannot read '{}'", log.string()));
  std::string line;
  if (!std::getline(in, line) || line.rfind(kLogMagic, 0) != 0) return 0;
  uint64_t offset = line.size() + 1;
  // Only the first few header lines are ours; give up rather than scan a huge foreign file.
  for (int i = 0; i < 64 && std::getline(in, line); ++i) {
    offset += line.size() + 1;
    if (line == kBodyMarker) return offset;
  }
  return 0;
}

}  // namespace meganeura::alert
