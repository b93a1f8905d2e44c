// Built-in models and their data: a multilayer perceptron on a synthetic classification set and
// a small character-level transformer (RMSNorm, rotary attention, SwiGLU, tied embeddings) on
// built-in text. Both are defined once and used for training and inference graphs alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meganeura/graph.h"

namespace meganeura::models {

// ---- MLP -----
struct MlpConfig {
  int64_t inputs = 16, hidden = 128, classes = 10, layers = 2;  // hidden layers
};
// x: [B, inputs] -> logits [B, classes]; parameters "mlp.<i>.weight" / "mlp.<i>.bias".
Tensor mlp(Graph& g, Tensor x, const MlpConfig& c);

// A deterministic synthetic classification set: Gaussian clusters warped by a fixed
// nonlinearity. `split` 0 is the training set, 1 the test set (disjoint draws).
struct Classification {
  std::vector<float> x;    // [n, inputs]
  std::vector<int32_t> y;  // [n]
  int64_t n = 0;
};
Classification synthetic_classification(const MlpConfig& c, int64_t n, int split, uint64_t seed = 1234);

// ---- Character transformer -----
struct CharGptConfig {
  int64_t vocab = 0;  // set from the text
  int64_t dim = 64, heads = 4, kv_heads = 2, layers = 2, ffn = 176, seq = 64;
  double rope_theta = 10000;
  // Inference in 8 or 4 bits (q8_0, q4_0; forward only): the embedding table and each
  // projection whose input width is a multiple of 32 held in that block format, a projection
  // then stored [out, in] (GGUF's layout, the transpose of the trained [in, out]) and multiplied
  // with matmul_q; the others stay f32 (chargpt_load_weights fills both from a checkpoint).
  DType weights = DType::f32;
};
// ids: i32 [B, S] -> logits [B, S, vocab].
Tensor chargpt(Graph& g, Tensor ids, const CharGptConfig& c);
// The same model for generation through per-layer key/value caches, the states
// "layers.<i>.key_cache" and "layers.<i>.value_cache" of [B, kv_heads, max_context, dim / heads]:
// ids i32 [B, S] are at absolute positions position, ..., position + S - 1 (position: an i32 [1]
// input read at run time), and each query attends to the last c.seq positions up to its own, the
// longest context training saw. CharGptGenerator (meganeura/generate.h) keeps max_context =
// c.seq and restarts the context at position 0 when it is full, as training windows start; a
// longer cache makes the window slide, and then the cached keys of later blocks come from
// states that saw a window of their own, context the model was never trained on (measured
// worse). Returns the last token's logits [B, vocab]. Running it past max_context fails naming
// the position.
Tensor chargpt_cached(Graph& g, Tensor ids, Tensor position, int64_t max_context, const CharGptConfig& c);

// The built-in corpus and its character vocabulary.
const std::string& builtin_text();
struct Vocabulary {
  std::string chars;  // index -> character
  int32_t id(char ch) const;
  std::vector<int32_t> encode(const std::string& s) const;
  std::string decode(const std::vector<int32_t>& ids) const;
};
Vocabulary vocabulary_of(const std::string& text);

}  // namespace meganeura::models
