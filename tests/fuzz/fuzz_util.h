// Shared by the fuzz targets: inputs that the code under test reads from a path are written to
// a private scratch directory (one per process, removed at exit), mode 600.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace meganeura::fuzz {

inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "meganeura-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::filesystem::path made = pattern;
    std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
    return made;
  }();
  return dir;
}

// Writes `data` to scratch_dir()/name, replacing what was there, and returns the path.
inline std::filesystem::path write_input(std::string_view name, const uint8_t* data, size_t size) {
  std::filesystem::path path = scratch_dir() / std::string(name);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror("open");
    std::abort();
  }
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) {
      std::perror("write");
      std::abort();
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return path;
}

// A property the target checks failed: report it and abort so libFuzzer keeps the input.
[[noreturn]] inline void property_failed(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "fuzz property violated: %s %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace meganeura::fuzz
