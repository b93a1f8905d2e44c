// SmolLM2-135M, the SmolVLA action expert and the Whisper-tiny encoder.
#include <cmath>

#include "meganeura/llama.h"
#include "meganeura/workloads.h"
#include "models/workload_parts.h"
#include "models/workloads_internal.h"

namespace meganeura::models {
using namespace parts;

// ---- SmolLM2 (Llama architecture, Hugging Face names) -----
namespace {
// The full scale is SmolLM2-135M's config.json; the ci scale the same architecture, smaller.
LlamaConfig lm_config(Scale s) {
  if (s == Scale::full) return smollm2_135m_config();
  LlamaConfig c = smollm2_135m_config();
  c.vocab_size = 512;
  c.hidden_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 256;
  return c;
}
int64_t lm_seq(Scale s) { return s == Scale::full ? 128 : 16; }
}  // namespace

Workload build_smollm2(Graph& g, Scale scale, bool minimal) {
  const LlamaConfig c = lm_config(scale);
  const int64_t s = minimal ? 1 : lm_seq(scale);
  Workload w;
  w.inputs = {{"input_ids", {1, s}, DType::i32}, {"labels", {s}, DType::i32}};
  Tensor ids = g.input("input_ids", {1, s}, DType::i32);
  Tensor labels = g.input("labels", {s}, DType::i32);
  Tensor x = llama_decoder(g, c, ids);
  Tensor emb = g.tensor(*g.find("model.embed_tokens.weight"));
  Tensor logits = matmul(reshape(x, {s, c.hidden_size}), emb, false, true);  // tied lm_head
  w.outputs = {{"logits", logits}};
  w.loss = cross_entropy(logits, labels, -100);
  return w;
}

// ---- SmolVLA action expert (names in docs/workloads.md) -----
namespace {
struct VlaConfig {
  int64_t dim, layers, heads, kv_heads, head_dim, ffn, actions, action_dim, vlm_tokens;
  double eps = 1e-5, theta = 10000;
};
VlaConfig vla_config(Scale s) {
  if (s == Scale::full) return {720, 16, 15, 5, 64, 2048, 50, 32, 16};
  return {96, 2, 6, 2, 16, 256, 8, 8, 6};
}
}  // namespace

Workload build_smolvla(Graph& g, Scale scale, bool minimal) {
  const VlaConfig c = vla_config(scale);
  const int64_t a = minimal ? 1 : c.actions, kv_width = c.kv_heads * c.head_dim, hq = c.heads * c.head_dim;
  Workload w;
  w.inputs = {{"noisy_actions", {1, a, c.action_dim}},
              {"timestep", {1}},
              {"vlm_kv", {1, c.vlm_tokens, kv_width}},
              {"target", {1, a, c.action_dim}}};
  Tensor noisy = g.input("noisy_actions", {1, a, c.action_dim});
  Tensor t = g.input("timestep", {1});
  Tensor vlm = g.input("vlm_kv", {1, c.vlm_tokens, kv_width});
  Tensor target = g.input("target", {1, a, c.action_dim});
  Tensor temb = timestep_embedding(t, 2 * c.dim);
  temb = linear(g, silu(linear(g, temb, "time_mlp_in", 2 * c.dim, c.dim, true)), "time_mlp_out", c.dim, c.dim, true);
  Tensor x = linear(g, noisy, "action_in_proj", c.action_dim, c.dim, true) + reshape(temb, {1, 1, c.dim});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const bool cross = l % 2 == 1;
    Tensor h = rms_norm(x, param(g, p + "input_layernorm.weight", {c.dim}, ones()), c.eps);
    Tensor q = split_heads(linear(g, h, p + "self_attn.q_proj", c.dim, hq, false), c.heads);
    Tensor src = cross ? vlm : h;
    const int64_t src_width = cross ? kv_width : c.dim;
    Tensor k = split_heads(linear(g, src, p + "self_attn.k_proj", src_width, kv_width, false), c.kv_heads);
    Tensor v = split_heads(linear(g, src, p + "self_attn.v_proj", src_width, kv_width, false), c.kv_heads);
    if (!cross) {
      q = rope(q, c.theta);
      k = rope(k, c.theta);
    }
    x = x + linear(g, merge_heads(attention(q, k, v, !cross)), p + "self_attn.o_proj", hq, c.dim, false);
    h = rms_norm(x, param(g, p + "post_attention_layernorm.weight", {c.dim}, ones()), c.eps);
    x = x + swiglu_mlp(g, h, p, c.dim, c.ffn);
  }
  x = rms_norm(x, param(g, "norm.weight", {c.dim}, ones()), c.eps);
  Tensor out = linear(g, x, "action_out_proj", c.dim, c.action_dim, true);
  w.outputs = {{"actions", out}};
  w.loss = mse(out, target);
  return w;
}

// ---- Whisper-tiny encoder (Hugging Face names) -----
namespace {
struct WhisperConfig {
  int64_t mels, frames, dim, heads, layers, ffn;
};
WhisperConfig whisper_config(Scale s) {
  if (s == Scale::full) return {80, 3000, 384, 6, 4, 1536};
  return {16, 64, 64, 4, 2, 256};
}
Tensor conv1d_p(Graph& g, Tensor x, const std::string& prefix, int64_t in, int64_t out, int64_t stride) {
  Tensor wt = param(g, prefix + ".weight", {out, in, 3}, normal(std::sqrt(1.0 / double(in * 3))));
  return channel_bias(conv1d(x, wt, stride, 1), param(g, prefix + ".bias", {out}, zeros()));
}
}  // namespace

Workload build_whisper(Graph& g, Scale scale, bool) {
  const WhisperConfig c = whisper_config(scale);
  const int64_t pos = c.frames / 2;
  Workload w;
  w.inputs = {{"input_features", {1, c.mels, c.frames}}, {"target", {1, pos, c.dim}}};
  Tensor mel = g.input("input_features", {1, c.mels, c.frames});
  Tensor target = g.input("target", {1, pos, c.dim});
  Tensor x = gelu(conv1d_p(g, mel, "encoder.conv1", c.mels, c.dim, 1));
  x = gelu(conv1d_p(g, x, "encoder.conv2", c.dim, c.dim, 2));
  x = permute(x, {0, 2, 1}) + param(g, "encoder.embed_positions.weight", {pos, c.dim}, zeros());
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "encoder.layers." + std::to_string(l) + ".";
    Tensor h = layer_norm_p(g, x, p + "self_attn_layer_norm", c.dim);
    Tensor q = split_heads(linear(g, h, p + "self_attn.q_proj", c.dim, c.dim, true), c.heads);
    Tensor k = split_heads(linear(g, h, p + "self_attn.k_proj", c.dim, c.dim, false), c.heads);
    Tensor v = split_heads(linear(g, h, p + "self_attn.v_proj", c.dim, c.dim, true), c.heads);
    x = x + linear(g, merge_heads(attention(q, k, v, false)), p + "self_attn.out_proj", c.dim, c.dim, true);
    h = layer_norm_p(g, x, p + "final_layer_norm", c.dim);
    h = linear(g, gelu(linear(g, h, p + "fc1", c.dim, c.ffn, true)), p + "fc2", c.ffn, c.dim, true);
    x = x + h;
  }
  x = layer_norm_p(g, x, "encoder.layer_norm", c.dim);
  w.outputs = {{"last_hidden_state", x}};
  w.loss = mse(x, target);
  return w;
}

}  // namespace meganeura::models
