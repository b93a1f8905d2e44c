// Checkpoints of a Session: every parameter and state buffer (optimizer moments, the step
// counter, gradient accumulators) in one safetensors file, written atomically, with metadata
// (format, format_version, graph_hash, step, layout). Loading is strict: a missing, extra,
// mis-typed or mis-shaped tensor is an error naming it. An inference session loads only the
// parameters and accepts (skips) the optimizer state of a training checkpoint.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "meganeura/session.h"

namespace meganeura {

void save_checkpoint(const Session& session, const std::filesystem::path& path,
                     const std::map<std::string, std::string>& metadata = {});

struct LoadOptions {
  bool parameters_only = false;  // inference: ignore optimizer state in the file
  // A parameter held in a block format (q8_0, q4_0: inference in 8 or 4 bits) is filled from the
  // file's f32 tensor, quantised as it is set; of its shape, or of the transposed shape where
  // `transposed(name)` says so (a model that trains [in, out] matrices and multiplies [out, in]
  // blocks). Every other tensor must be stored as the session stores it.
  std::function<bool(const std::string&)> transposed;
};
// Returns the file's metadata.
std::map<std::string, std::string> load_checkpoint(Session& session, const std::filesystem::path& path,
                                                   const LoadOptions& options = {});

}  // namespace meganeura
