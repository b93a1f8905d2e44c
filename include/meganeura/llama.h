// Llama-architecture language models from Hugging Face files: the shape read from
// `config.json` (LlamaConfig), the forward graph (input_ids [B, S] -> logits [B, S, vocab])
// with the checkpoint's tensor names, and its weights loaded by name from one safetensors file
// or a sharded set (meganeura/weights.h). SmolLM2-135M is one such configuration
// (smollm2_135m_config), and the smollm2 workload is built from it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

#include "meganeura/graph.h"
#include "meganeura/session.h"

namespace meganeura::models {

// A config.json that cannot be used: malformed JSON, a missing or ill-typed field, a value out
// of range, or an architecture or option this builder does not implement. The message names
// the file and the field.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `rope_scaling`: null (none), {"rope_type" (or "type"): "linear", "factor"} or
// {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
// "original_max_position_embeddings"}; any other type is refused by name.
struct RopeScaling {
  enum class Type : uint8_t { none, linear, llama3 };
  Type type = Type::none;
  double factor = 1;
  double low_freq_factor = 1;
  double high_freq_factor = 1;
  int64_t original_max_position_embeddings = 0;
  bool operator==(const RopeScaling&) const = default;
};

// The fields of transformers' LlamaConfig that set the forward pass. Required in the file:
// vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads. The others
// take transformers' defaults when absent: num_key_value_heads = num_attention_heads, head_dim =
// hidden_size / num_attention_heads, rope_theta 10000, rms_norm_eps 1e-6, tie_word_embeddings
// false, max_position_embeddings 2048, no rope scaling. hidden_act must be "silu", attention_bias
// and mlp_bias false, and `architectures`, when present, ["LlamaForCausalLM"].
struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 2048;
  double rope_theta = 10000;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  RopeScaling rope_scaling;
  bool operator==(const LlamaConfig&) const = default;
};

// Parses config.json text; `source` names the file in messages. Throws ConfigError.
LlamaConfig parse_llama_config(std::string_view json_text, const std::string& source = "config.json");
// Reads `path`: a config.json, or a directory holding one, or a Llama-architecture .gguf file
// (its llama.* keys; docs/gguf.md). Throws ConfigError.
LlamaConfig read_llama_config(const std::filesystem::path& path);

// SmolLM2-135M's config.json values.
LlamaConfig smollm2_135m_config();

// The rotary attributes of a config (theta and scaling).
RopeAttrs llama_rope_attrs(const LlamaConfig& c);

// The decoder up to the final norm: the input ids i32 [B, S] -> hidden states [B, S, hidden].
// Creates the parameters with Hugging Face names (model.embed_tokens.weight,
// model.layers.<i>.self_attn.q_proj.weight, ..., model.norm.weight), Linear weights [out, in].
Tensor llama_decoder(Graph& g, const LlamaConfig& c, Tensor input_ids);

// The forward pass: adds the input "input_ids" i32 [batch, seq] and returns logits
// [batch, seq, vocab_size]; the head is model.embed_tokens.weight when the embeddings are tied,
// else lm_head.weight [vocab_size, hidden_size].
Tensor build_llama(Graph& g, const LlamaConfig& c, int64_t batch, int64_t seq);

// The forward pass of generation: `seq` new tokens per sequence, the input "input_ids.<seq>"
// i32 [batch, seq], sequence b at positions position[b] .. position[b] + seq - 1, where
// "position" is an i32 [batch] input read when the program runs (-1: sequence b sits the run
// out, writing nothing). Keys and values go into per-layer caches of
// `max_context` positions, the states model.layers.<i>.self_attn.{key,value}_cache
// [batch, kv_heads, max_context, head_dim], written in place; attention reads the cache prefix.
// Returns the logits of the last new token [batch, vocab_size]. Graphs for several `seq` share
// the weights, the caches and "position" by name in one session (meganeura/generate.h).
// `weights` q8_0 or q4_0 stores the embedding, the projections and the head in that block
// format, read by matmul_q (the embedding's rows decoded as they are gathered); every row length
// must then be a multiple of 32. The norms stay f32.
Tensor build_llama_cached(Graph& g, const LlamaConfig& c, int64_t batch, int64_t seq, int64_t max_context,
                          DType weights = DType::f32);

}  // namespace meganeura::models
