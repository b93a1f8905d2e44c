#include "posix_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "meganeura/safetensors.h"
#include "quote.h"

namespace meganeura::io::detail {

namespace fs = std::filesystem;

FileDescriptor::~FileDescriptor() { close(); }

int FileDescriptor::close() {
  if (fd_ < 0) return 0;
  // Linux releases the descriptor even when close fails, so never retry.
  int rc = ::close(fd_);
  fd_ = -1;
  return rc == 0 ? 0 : errno;
}

std::string os_error_text(const fs::path& path, const char* op, int err) {
  return quote_name(path.string()) + ": " + op + ": " + std::strerror(err);
}

FileDescriptor open_for_reading(const fs::path& path, const std::string& prefix) {
  int fd;
  do fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) throw Error(prefix + "cannot read " + os_error_text(path, "open", errno));
  return FileDescriptor(fd);
}

size_t read_at(int fd, void* buffer, size_t n, uint64_t offset, const fs::path& path, const std::string& prefix) {
  // Linux transfers at most this much per call.
  constexpr size_t kMaxChunk = 0x7ffff000;
  auto* out = static_cast<char*>(buffer);
  size_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd, out + done, std::min(n - done, kMaxChunk), static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error(prefix + "cannot read " + os_error_text(path, "read", errno));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

int write_pieces(int fd, std::vector<iovec> pieces) {
  size_t first = 0;
  while (first < pieces.size()) {
    int count = static_cast<int>(std::min<size_t>(pieces.size() - first, IOV_MAX));
    ssize_t put = ::writev(fd, pieces.data() + first, count);
    if (put < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (put == 0) return EIO;
    // Skip what went out; a partial write leaves the rest of a piece for the next call.
    auto left = static_cast<size_t>(put);
    while (first < pieces.size() && left >= pieces[first].iov_len) {
      left -= pieces[first].iov_len;
      ++first;
    }
    if (left > 0) {
      pieces[first].iov_base = static_cast<char*>(pieces[first].iov_base) + left;
      pieces[first].iov_len -= left;
    }
  }
  return 0;
}

namespace {

std::atomic<unsigned> temp_counter{0};

// A name no other writer (thread or process) will pick, hidden from directory listings.
fs::path temp_path_for(const fs::path& path) {
  std::string name = "." + path.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                     std::to_string(temp_counter.fetch_add(1));
  return path.parent_path() / name;
}

int fsync_directory(const fs::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  FileDescriptor owner(fd);
  if (::fsync(fd) != 0 && errno != EINVAL) return errno;  // some filesystems cannot sync dirs
  return owner.close();
}

}  // namespace

void replace_atomically(const fs::path& path, const std::string& prefix, const std::function<int(int fd)>& write_body) {
  const fs::path temp = temp_path_for(path);
  auto fail = [&](const fs::path& where, const char* op, int err) {
    throw Error(prefix + "cannot write " + quote_name(path.string()) + ": " + os_error_text(where, op, err));
  };
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail(temp, "create", errno);
  // Removes the temporary file on every way out (errors, exceptions) until the rename.
  struct TempRemover {
    const fs::path& temp;
    bool armed = true;
    ~TempRemover() {
      if (armed) ::unlink(temp.c_str());
    }
  } remover{temp};
  FileDescriptor file(fd);
  int err = write_body(fd);
  if (err != 0) fail(temp, "write", err);
  if (::fsync(fd) != 0) fail(temp, "fsync", errno);
  if ((err = file.close()) != 0) fail(temp, "close", err);
  if (::rename(temp.c_str(), path.c_str()) != 0) fail(path, "rename", errno);
  remover.armed = false;
  // The rename is only durable once the directory entry is on disk.
  if ((err = fsync_directory(path.parent_path())) != 0) fail(path.parent_path(), "fsync", err);
}

}  // namespace meganeura::io::detail
