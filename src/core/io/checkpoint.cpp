// Checkpoint conventions on top of safetensors: metadata keys and strict loading.
#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "meganeura/safetensors.h"
#include "quote.h"

namespace meganeura::io {

namespace fs = std::filesystem;

namespace {

const std::string kPrefix = "[checkpoint] ";

std::string describe(DType dtype, std::span<const int64_t> shape) {
  return std::string(dtype_name(dtype)) + " " + format_shape(shape);
}

}  // namespace

void check_checkpoint_metadata(const std::map<std::string, std::string>& metadata, const fs::path& source) {
  auto fail = [&](const std::string& what) {
    throw Error(kPrefix + detail::quote_name(source.string()) + ": " + what);
  };
  if (auto it = metadata.find("format"); it != metadata.end() && it->second != kCheckpointFormat) {
    fail("metadata format is " + detail::quote_name(it->second) + ", expected " +
         detail::quote_name(kCheckpointFormat));
  }
  if (auto it = metadata.find("format_version"); it != metadata.end() && it->second != kCheckpointFormatVersion) {
    fail("unsupported format_version " + detail::quote_name(it->second) + " (this build reads version " +
         kCheckpointFormatVersion + ")");
  }
  if (auto it = metadata.find("step"); it != metadata.end()) {
    const std::string& s = it->second;
    uint64_t step = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), step);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
      fail("metadata step " + detail::quote_name(s) + " is not a non-negative integer");
    }
  }
  if (auto it = metadata.find("layout"); it != metadata.end() && !nlohmann::json::accept(it->second)) {
    fail("metadata layout is not valid JSON");
  }
}

void check_checkpoint_matches(const SafetensorsFile& file, const std::vector<ExpectedTensor>& expected,
                              const std::vector<std::string>& ignored_state) {
  std::vector<std::string> problems;
  std::map<std::string, const ExpectedTensor*> wanted;
  for (const ExpectedTensor& e : expected) wanted.emplace(e.name, &e);
  for (const auto& [name, e] : wanted) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) {
      problems.push_back("missing tensor " + detail::quote_name(name) + " (expected " + describe(e->dtype, e->shape) +
                         ")");
    } else if (it->second.dtype != e->dtype || it->second.shape != e->shape) {
      problems.push_back("tensor " + detail::quote_name(name) + " is " + describe(it->second.dtype, it->second.shape) +
                         ", expected " + describe(e->dtype, e->shape));
    }
  }
  auto is_ignored_state = [&](const std::string& name) {
    auto dot = name.find('.');
    return dot != std::string::npos && wanted.count(name.substr(dot + 1)) &&
           std::find(ignored_state.begin(), ignored_state.end(), name.substr(0, dot)) != ignored_state.end();
  };
  for (const auto& [name, record] : file.tensors) {
    if (!wanted.count(name) && !is_ignored_state(name)) {
      problems.push_back("unexpected tensor " + detail::quote_name(name) + " (" + describe(record.dtype, record.shape) +
                         ")");
    }
  }
  if (problems.empty()) return;
  std::string message = kPrefix + detail::quote_name(file.source.string()) + ": " + problems.front();
  if (problems.size() > 1) message += " (and " + std::to_string(problems.size() - 1) + " more problems)";
  throw Error(message);
}

void write_checkpoint(const fs::path& path, const Checkpoint& checkpoint) {
  auto metadata = checkpoint.metadata;
  metadata["format"] = kCheckpointFormat;
  metadata["format_version"] = kCheckpointFormatVersion;
  check_checkpoint_metadata(metadata, path);
  NamedTensorViews views;
  views.reserve(checkpoint.tensors.size());
  for (const auto& [name, record] : checkpoint.tensors) views.emplace_back(name, record.view());
  write_safetensors(path, views, metadata);
}

Checkpoint read_checkpoint(const fs::path& path) {
  Checkpoint checkpoint = read_safetensors(path);
  check_checkpoint_metadata(checkpoint.metadata, path);
  return checkpoint;
}

}  // namespace meganeura::io
