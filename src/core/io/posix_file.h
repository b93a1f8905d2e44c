// Thin POSIX file helpers for the safetensors reader and writer: full reads and writes
// that survive short transfers and EINTR, and the atomic replace protocol.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace meganeura::io::detail {

// Owns a file descriptor.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd = -1) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();
  int get() const { return fd_; }
  // Closes now and reports close's errno (0 on success); NFS reports write errors here.
  int close();

 private:
  int fd_;
};

// "'<path>': <op>: <strerror(err)>".
std::string os_error_text(const std::filesystem::path& path, const char* op, int err);

// Opens for reading; throws io::Error with `prefix` on failure.
FileDescriptor open_for_reading(const std::filesystem::path& path, const std::string& prefix);

// Reads up to n bytes at offset; returns fewer only at end of file.
size_t read_at(int fd, void* buffer, size_t n, uint64_t offset, const std::filesystem::path& path,
               const std::string& prefix);

// Gathers and writes every byte of `pieces`; returns 0 or the errno of the failed write.
int write_pieces(int fd, std::vector<iovec> pieces);

// Writes `path` atomically: `write_body(fd)` fills a fresh temporary file in the same
// directory (returning 0 or an errno), which is then fsynced, renamed over `path`, and the
// directory fsynced. On any failure the temporary file is removed and io::Error is thrown.
void replace_atomically(const std::filesystem::path& path, const std::string& prefix,
                        const std::function<int(int fd)>& write_body);

}  // namespace meganeura::io::detail
