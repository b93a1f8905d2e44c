// The Llama forward graph from a LlamaConfig (meganeura/llama.h), Hugging Face tensor names.
#include "meganeura/llama.h"

#include "models/workload_parts.h"

namespace meganeura::models {
using namespace parts;

Tensor llama_decoder(Graph& g, const LlamaConfig& c, Tensor ids) {
  const int64_t dim = c.hidden_size, hd = c.head_dim, heads = c.num_attention_heads, kv = c.num_key_value_heads;
  const RopeAttrs ra = llama_rope_attrs(c);
  Tensor emb = param(g, "model.embed_tokens.weight", {c.vocab_size, dim}, normal(0.02));
  Tensor x = embedding(emb, ids);  // [B, S, D]
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Tensor h = rms_norm(x, param(g, p + "input_layernorm.weight", {dim}, ones()), c.rms_norm_eps);
    Tensor q = rope_scaled(split_heads(linear(g, h, p + "self_attn.q_proj", dim, heads * hd, false), heads), ra);
    Tensor k = rope_scaled(split_heads(linear(g, h, p + "self_attn.k_proj", dim, kv * hd, false), kv), ra);
    Tensor v = split_heads(linear(g, h, p + "self_attn.v_proj", dim, kv * hd, false), kv);
    x = x + linear(g, merge_heads(attention(q, k, v, true)), p + "self_attn.o_proj", heads * hd, dim, false);
    h = rms_norm(x, param(g, p + "post_attention_layernorm.weight", {dim}, ones()), c.rms_norm_eps);
    x = x + swiglu_mlp(g, h, p, dim, c.intermediate_size);
  }
  return rms_norm(x, param(g, "model.norm.weight", {dim}, ones()), c.rms_norm_eps);
}

Tensor build_llama(Graph& g, const LlamaConfig& c, int64_t batch, int64_t seq) {
  if (batch <= 0 || seq <= 0) {
    throw std::invalid_argument("[llama] batch and sequence length must be positive, got " + std::to_string(batch) +
                                " and " + std::to_string(seq));
  }
  if (seq > c.max_position_embeddings) {
    throw std::invalid_argument("[llama] sequence length " + std::to_string(seq) +
                                " exceeds max_position_embeddings = " + std::to_string(c.max_position_embeddings));
  }
  Tensor ids = g.input("input_ids", {batch, seq}, DType::i32);
  Tensor x = reshape(llama_decoder(g, c, ids), {batch * seq, c.hidden_size});
  Tensor head = c.tie_word_embeddings ? g.tensor(*g.find("model.embed_tokens.weight"))
                                      : param(g, "lm_head.weight", {c.vocab_size, c.hidden_size}, normal(0.02));
  return reshape(matmul(x, head, false, true), {batch, seq, c.vocab_size});
}

}  // namespace meganeura::models
