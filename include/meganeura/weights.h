// Model weights in the ecosystem's files: one safetensors file, or a sharded set described by
// `model.safetensors.index.json` ({"weight_map": {tensor name: shard file}}). Tensors are
// matched to a graph's parameters and states by name; f32, f64, f16 and bf16 are converted to
// the session's storage type. A missing or mis-shaped tensor is an error naming it; tensors
// the graph does not use (a tied lm_head, a decoder) are ignored.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "meganeura/safetensors.h"
#include "meganeura/session.h"

namespace meganeura {

// Largest accepted model.safetensors.index.json (real ones are tens of kilobytes).
inline constexpr uint64_t kMaxIndexBytes = 16ull << 20;

// `path`: a .safetensors file, an index .json, or a directory holding either
// model.safetensors.index.json or model.safetensors; or a Llama-architecture .gguf file, whose
// tensors come under their Hugging Face names, decoded to f32 (docs/gguf.md). Reads only the
// tensors `names` lists (all when empty).
std::map<std::string, io::TensorRecord> read_weights(const std::filesystem::path& path,
                                                     const std::vector<std::string>& names = {});

// Loads every parameter and state of `g` from `path` into `s` (strict: each must be present
// with the graph's shape). Returns the number of tensors loaded.
size_t load_weights(Session& s, const Graph& g, const std::filesystem::path& path);
// The same for the parameters alone: states (a generator's key/value caches) keep their values.
size_t load_parameters(Session& s, const Graph& g, const std::filesystem::path& path);

// Writes every parameter and state of `g` from `s` as f32 (single file).
void save_weights(const Session& s, const Graph& g, const std::filesystem::path& path);

}  // namespace meganeura
