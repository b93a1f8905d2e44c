// Llama-architecture GGUF files read as a Hugging Face config and checkpoint (gguf_model.cpp):
// read_llama_config and read_weights take a .gguf path through these.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meganeura/gguf.h"
#include "meganeura/llama.h"
#include "meganeura/safetensors.h"

namespace meganeura::models {

// A path to a .gguf file (not a directory).
bool is_gguf(const std::filesystem::path& path);

// The config from the file's llama.* keys (llama.embedding_length, feed_forward_length,
// block_count, attention.head_count[_kv], attention.key_length, context_length, rope.freq_base,
// attention.layer_norm_rms_epsilon, vocab_size or the embedding's rows, rope.scaling.type and
// factor), tie_word_embeddings when there is no output.weight; checked as a config.json is.
// ConfigError naming the key for a missing or mistyped one, or another architecture.
LlamaConfig llama_config_from_gguf(const std::filesystem::path& path);

// The file's tensors under their Hugging Face names, decoded to f32 (those `names` lists, all
// when empty; tensors the Llama graph does not use are left out).
std::map<std::string, io::TensorRecord> read_gguf_weights(const std::filesystem::path& path,
                                                          const std::vector<std::string>& names);

// ---- Writing -------------------------------------------------------------------------------
// A Hugging Face Llama checkpoint as a GGUF file in llama.cpp's layout: the llama.* keys of the
// config, its tensors under llama.cpp's names with the query and key rows permuted as llama.cpp
// expects, 2-D tensors in `type` and 1-D ones (the norms) in f32, unless an override matches.
struct GgufExportOptions {
  io::GgmlType type = io::GgmlType::q8_0;
  // (ECMAScript regex searched in the Hugging Face name, type): the first match sets the type.
  std::vector<std::pair<std::string, io::GgmlType>> overrides;
  std::vector<std::pair<std::string, io::GgufValue>> metadata;  // more keys (the tokenizer's)
};
struct GgufExportedTensor {
  std::string name, gguf_name;
  io::GgmlType type = io::GgmlType::f32;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  double rel_error = 0;  // relative L2 error of the stored values against the checkpoint's
};
struct GgufExport {
  std::vector<GgufExportedTensor> tensors;
  uint64_t f32_bytes = 0, bytes = 0;
};
// Writes atomically. Each tensor of the config must be in `weights` (any float dtype) with the
// config's shape; ConfigError naming a missing or mis-shaped one, a row length that is not a
// multiple of the chosen type's block, or a config GGUF cannot hold (Llama 3 rope scaling).
GgufExport write_llama_gguf(const std::filesystem::path& path, const LlamaConfig& config,
                            const std::map<std::string, io::TensorRecord>& weights, const GgufExportOptions& options);

// A type's name as the CLI spells it (q8_0, q4_0, q4_k, f16, bf16, f32), and back (nullopt
// for another name).
std::string ggml_type_name(io::GgmlType type);
std::optional<io::GgmlType> ggml_type_from_name(std::string_view name);

}  // namespace meganeura::models
