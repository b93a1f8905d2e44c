// Runs the built `meganeura` binary with arguments and captures its status, stdout and stderr.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "common/process.h"

namespace cli_run {

inline constexpr double kTimeoutS = 600;  // ctest's limit for a test

struct Result {
  int status = -1;
  std::string out, err;
  nlohmann::json json() const { return nlohmann::json::parse(out); }
};

// A per-process scratch folder under the system's temporary directory.
inline std::filesystem::path temp_dir(const std::string& prefix) {
  std::filesystem::path d = std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d;
}

// The build's meganeura, or MEGANEURA_CLI where set: a shell command that runs it (a packed
// folder runs its binaries through its own dynamic loader, scripts/gpu-check.sh).
inline std::string command() {
  const char* c = std::getenv("MEGANEURA_CLI");
  return c && *c ? std::string(c) : std::string(MEGANEURA_BINARY_DIR) + "/bin/meganeura";
}

// `env`: assignments put before the command (VAR=value ...).
inline Result run(const std::string& args, const std::filesystem::path& dir, const std::string& env = "") {
  std::filesystem::create_directories(dir);  // a test may have removed the shared folder
  const std::filesystem::path err = dir / "stderr.txt";
  const std::string cmd = env + " " + command() + " " + args + " 2>" + err.string();
  Result r;
  // Through the project's one spawn helper: default signal dispositions and an empty mask
  // whatever the test runner set; the shell reports a signal death as 128 + n.
  auto done = meganeura::common::run({.argv = {"/bin/sh", "-c", cmd}}, "", kTimeoutS);
  r.out = std::move(done.out);
  r.status = done.status;
  std::ifstream f(err);
  r.err.assign(std::istreambuf_iterator<char>(f), {});
  return r;
}

}  // namespace cli_run
