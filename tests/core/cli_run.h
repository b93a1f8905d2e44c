// Runs the built `meganeura` binary with arguments and captures its status, stdout and stderr.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

namespace cli_run {

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
  const std::filesystem::path err = dir / "stderr.txt";
  const std::string cmd = env + " " + command() + " " + args + " 2>" + err.string();
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  std::ifstream f(err);
  r.err.assign(std::istreambuf_iterator<char>(f), {});
  return r;
}

}  // namespace cli_run
