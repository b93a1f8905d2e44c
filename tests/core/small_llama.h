// A small Llama config (GQA, untied head) and random weights for it, shared by the GGUF tests.
#pragma once

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "meganeura/llama.h"
#include "meganeura/session.h"

namespace meganeura::testing {

inline models::LlamaConfig small_llama_config() {
  models::LlamaConfig c;
  c.vocab_size = 320;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 128;
  c.rope_theta = 5000;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = false;
  return c;
}

// Normal weights for every parameter of `s`, scaled so that the residual stream stays of order
// one through every layer (as a trained model's does) and greedy tokens vary along a sequence:
// norms 1 +- 0.05, embeddings of unit scale, matrices 1.5 / sqrt(fan_in).
inline std::map<std::string, std::vector<float>> residual_scaled_weights(const Session& s, unsigned seed) {
  std::mt19937 rng(seed);
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, b] : s.buffers()) {
    if (b.role != Role::parameter) continue;
    const bool norm = name.find("norm") != std::string::npos;
    const double fan_in = double(b.type.shape.back());
    const double std = norm ? 0.05 : name.find("embed") != std::string::npos ? 1.0 : 1.5 / std::sqrt(fan_in);
    std::normal_distribution<double> d(norm ? 1.0 : 0.0, std);
    std::vector<float>& v = out[name];
    v.resize(size_t(b.type.numel()));
    for (float& x : v) x = float(d(rng));
  }
  return out;
}

}  // namespace meganeura::testing
