// Llama-architecture GGUF files read as a Hugging Face config and checkpoint (gguf_model.cpp):
// read_llama_config and read_weights take a .gguf path through these.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

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

}  // namespace meganeura::models
