// Exceptions the binding raises itself, and the checks that raise them.
#pragma once

#include <filesystem>
#include <string>

namespace meganeura::python {

// Becomes OSError(error, "<what>: <strerror>", path): FileNotFoundError for ENOENT.
struct PathError {
  int error = 0;
  const char* what = "";
  std::string path;
};

// A file that must exist before a reader opens it (FileNotFoundError naming it otherwise).
void require_readable(const std::filesystem::path& path, const char* what);
// The directory a file is to be written into must exist.
void require_parent_directory(const std::filesystem::path& path, const char* what);

}  // namespace meganeura::python
