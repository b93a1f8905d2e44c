// The Llama forward graph from a LlamaConfig (meganeura/llama.h), Hugging Face tensor names.
#include "meganeura/llama.h"

#include "models/workload_parts.h"

namespace meganeura::models {
using namespace parts;

namespace {

// The per-layer key/value caches of generation and the position their new rows go to.
struct Cache {
  Tensor position;  // i32 [batch], a position per sequence (-1: the sequence sits the run out)
  int64_t max_context = 0;
  DType weights = DType::f32;  // the projections' and the untied head's type
};

// y = x W^T for W [out, in] named prefix.weight, stored in `type` (a block format: matmul_q).
Tensor projection(Graph& g, Tensor x, const std::string& prefix, int64_t in, int64_t out, DType type) {
  if (type == DType::f32) return linear(g, x, prefix, in, out, false);
  return matmul_q(x, g.parameter(prefix + ".weight", {out, in}, normal(0.02), type));
}

Tensor attend(Graph& g, const LlamaConfig& c, const std::string& p, Tensor h, const Cache* cache) {
  const int64_t dim = c.hidden_size, hd = c.head_dim, heads = c.num_attention_heads, kv = c.num_key_value_heads;
  const RopeAttrs ra = llama_rope_attrs(c);
  const DType wt = cache ? cache->weights : DType::f32;
  Tensor q = split_heads(projection(g, h, p + "self_attn.q_proj", dim, heads * hd, wt), heads);
  Tensor k = split_heads(projection(g, h, p + "self_attn.k_proj", dim, kv * hd, wt), kv);
  Tensor v = split_heads(projection(g, h, p + "self_attn.v_proj", dim, kv * hd, wt), kv);
  if (cache == nullptr) return attention(rope_scaled(q, ra), rope_scaled(k, ra), v, true);
  const Shape shape{h.dim(0), kv, cache->max_context, hd};
  Tensor kc = g.state(p + "self_attn.key_cache", shape), vc = g.state(p + "self_attn.value_cache", shape);
  Tensor kn = kv_cache_write(kc, rope_at_scaled(k, cache->position, ra), cache->position);
  Tensor vn = kv_cache_write(vc, v, cache->position);
  g.assign(kc, kn);
  g.assign(vc, vn);
  return cached_attention(rope_at_scaled(q, cache->position, ra), kn, vn, cache->position);
}

Tensor decoder(Graph& g, const LlamaConfig& c, Tensor ids, const Cache* cache) {
  const int64_t dim = c.hidden_size, heads = c.num_attention_heads, hd = c.head_dim, ffn = c.intermediate_size;
  const DType wt = cache ? cache->weights : DType::f32;
  Tensor emb = g.parameter("model.embed_tokens.weight", {c.vocab_size, dim}, normal(0.02), wt);
  Tensor x = embedding(emb, ids);  // [B, S, D]
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Tensor h = rms_norm(x, param(g, p + "input_layernorm.weight", {dim}, ones()), c.rms_norm_eps);
    x = x + projection(g, merge_heads(attend(g, c, p, h, cache)), p + "self_attn.o_proj", heads * hd, dim, wt);
    h = rms_norm(x, param(g, p + "post_attention_layernorm.weight", {dim}, ones()), c.rms_norm_eps);
    Tensor gate = projection(g, h, p + "mlp.gate_proj", dim, ffn, wt),
           up = projection(g, h, p + "mlp.up_proj", dim, ffn, wt);
    x = x + projection(g, swiglu(gate, up), p + "mlp.down_proj", ffn, dim, wt);
  }
  return rms_norm(x, param(g, "model.norm.weight", {dim}, ones()), c.rms_norm_eps);
}

// [N, hidden] -> [N, vocab]; a tied head reads the embedding table in its type.
Tensor head(Graph& g, const LlamaConfig& c, Tensor x, DType weights = DType::f32) {
  if (!c.tie_word_embeddings) return projection(g, x, "lm_head", c.hidden_size, c.vocab_size, weights);
  Tensor table = g.tensor(*g.find("model.embed_tokens.weight"));
  return dtype_is_block(table.dtype()) ? matmul_q(x, table) : matmul(x, table, false, true);
}

void require_positive(int64_t batch, int64_t seq) {
  if (batch <= 0 || seq <= 0) {
    throw std::invalid_argument("[llama] batch and sequence length must be positive, got " + std::to_string(batch) +
                                " and " + std::to_string(seq));
  }
}

}  // namespace

Tensor llama_decoder(Graph& g, const LlamaConfig& c, Tensor ids) { return decoder(g, c, ids, nullptr); }

Tensor build_llama_cached(Graph& g, const LlamaConfig& c, int64_t batch, int64_t seq, int64_t max_context,
                          DType weights) {
  require_positive(batch, seq);
  if (weights != DType::f32 && !dtype_is_block(weights)) {
    throw std::invalid_argument("[llama] weights must be f32, q8_0 or q4_0, got " + std::string(dtype_name(weights)));
  }
  if (max_context < seq || max_context > c.max_position_embeddings) {
    throw std::invalid_argument("[llama] max_context " + std::to_string(max_context) + " must be in [" +
                                std::to_string(seq) +
                                ", max_position_embeddings = " + std::to_string(c.max_position_embeddings) + "]");
  }
  Tensor ids = g.input("input_ids." + std::to_string(seq), {batch, seq}, DType::i32);
  const Cache cache{g.find("position") ? g.tensor(*g.find("position")) : g.input("position", {batch}, DType::i32),
                    max_context, weights};
  Tensor x = decoder(g, c, ids, &cache);                                          // [B, S, D]
  Tensor last = reshape(slice_axis(x, 1, seq - 1, seq), {batch, c.hidden_size});  // the last new token
  return head(g, c, last, weights);
}

Tensor build_llama(Graph& g, const LlamaConfig& c, int64_t batch, int64_t seq) {
  require_positive(batch, seq);
  if (seq > c.max_position_embeddings) {
    throw std::invalid_argument("[llama] sequence length " + std::to_string(seq) +
                                " exceeds max_position_embeddings = " + std::to_string(c.max_position_embeddings));
  }
  Tensor ids = g.input("input_ids", {batch, seq}, DType::i32);
  Tensor x = reshape(llama_decoder(g, c, ids), {batch * seq, c.hidden_size});
  return reshape(head(g, c, x), {batch, seq, c.vocab_size});
}

}  // namespace meganeura::models
