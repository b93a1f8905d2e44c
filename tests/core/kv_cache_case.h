// A prefill and a decode program over one attention layer with a key/value cache, and the
// same layer over the whole sequence at once; a Llama decoder in the same two forms, and
// greedy decoding through each: the CPU and Vulkan cache tests run them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "meganeura/session.h"

namespace meganeura::kv_case {

struct Dims {
  int64_t b = 2, h = 4, hkv = 2, d = 8, tmax = 24;
  double theta = 10000;
};

// Steps of `s` tokens at a runtime position "pos": inputs "q.<s>" [B, H, S, D], "k.<s>" and
// "v.<s>" [B, Hkv, S, D] (named by S: programs of one session share buffers by name); q and k
// are rotated, k and v written to the cache states "cache.k" and "cache.v"; output "y.<s>".
inline std::string named(const std::string& base, int64_t s) { return base + "." + std::to_string(s); }
inline Graph step_graph(const Dims& m, int64_t s) {
  Graph g;
  Tensor q = g.input(named("q", s), {m.b, m.h, s, m.d});
  Tensor k = g.input(named("k", s), {m.b, m.hkv, s, m.d});
  Tensor v = g.input(named("v", s), {m.b, m.hkv, s, m.d});
  Tensor pos = g.input("pos", {1}, DType::i32);
  Tensor kc = g.state("cache.k", {m.b, m.hkv, m.tmax, m.d});
  Tensor vc = g.state("cache.v", {m.b, m.hkv, m.tmax, m.d});
  Tensor k_new = kv_cache_write(kc, rope_at(k, pos, m.theta), pos);
  Tensor v_new = kv_cache_write(vc, v, pos);
  g.assign(kc, k_new);
  g.assign(vc, v_new);
  g.output(named("y", s), cached_attention(rope_at(q, pos, m.theta), k_new, v_new, pos));
  return g;
}

// The whole sequence of t tokens: causal attention of the rotated q and k; output "y_all".
inline Graph full_graph(const Dims& m, int64_t t) {
  Graph g;
  Tensor q = g.input("q_all", {m.b, m.h, t, m.d});
  Tensor k = g.input("k_all", {m.b, m.hkv, t, m.d});
  Tensor v = g.input("v_all", {m.b, m.hkv, t, m.d});
  g.output("y_all", attention(rope(q, m.theta), rope(k, m.theta), v, true));
  return g;
}

// Positions [t0, t0 + s) of x laid out [outer, t, d].
inline std::vector<float> steps(const std::vector<float>& x, int64_t outer, int64_t t, int64_t d, int64_t t0,
                                int64_t s) {
  std::vector<float> out;
  for (int64_t o = 0; o < outer; ++o)
    out.insert(out.end(), x.begin() + (o * t + t0) * d, x.begin() + (o * t + t0 + s) * d);
  return out;
}

// ---- A Llama decoder (SmolLM2's ci-scale configuration and parameter names) in two forms:
// over a whole window, recomputed for every token, and in decode form with a cache per layer.
struct Lm {
  int64_t vocab = 512, dim = 96, layers = 2, heads = 6, kv_heads = 2, head_dim = 16, ffn = 256;
  double theta = 100000, eps = 1e-5;
};

// Weights drawn so that attention and the MLP, not the token's own embedding, decide the next
// token (a small embedding): greedy tokens vary, and depend on the cache being right.
inline Tensor weight(Graph& g, const std::string& name, Shape shape, double std = 0.2) {
  return g.parameter(name, std::move(shape), Init{Init::normal, std});
}
inline Tensor lin(Graph& g, Tensor x, const std::string& name, int64_t in, int64_t out) {
  return matmul(x, weight(g, name + ".weight", {out, in}), false, true);
}
inline Tensor split(Tensor x, int64_t heads, int64_t hd) {
  return permute(reshape(x, {1, x.dim(1), heads, hd}), {0, 2, 1, 3});  // [1, H, S, Dh]
}
inline Tensor merge(Tensor x) { return reshape(permute(x, {0, 2, 1, 3}), {1, x.dim(2), x.dim(1) * x.dim(3)}); }

// Logits [S, vocab] of `s` tokens ("ids.<s>"); with `cached`, at positions pos..pos+S-1 through
// the caches "cache.{k,v}.<layer>" of `tmax` positions, else over positions 0..S-1 alone.
inline Graph lm_graph(const Lm& c, int64_t s, bool cached, int64_t tmax) {
  Graph g;
  Tensor ids = g.input(named("ids", s), {1, s}, DType::i32);
  Tensor pos = cached ? g.input("pos", {1}, DType::i32) : Tensor{};
  Tensor emb = weight(g, "model.embed_tokens.weight", {c.vocab, c.dim}, 0.1);
  Tensor x = embedding(emb, ids);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Tensor h = rms_norm(x, g.parameter(p + "input_layernorm.weight", {c.dim}, Init{Init::ones}), c.eps);
    Tensor q = split(lin(g, h, p + "self_attn.q_proj", c.dim, c.heads * c.head_dim), c.heads, c.head_dim);
    Tensor k = split(lin(g, h, p + "self_attn.k_proj", c.dim, c.kv_heads * c.head_dim), c.kv_heads, c.head_dim);
    Tensor v = split(lin(g, h, p + "self_attn.v_proj", c.dim, c.kv_heads * c.head_dim), c.kv_heads, c.head_dim);
    Tensor a;
    if (cached) {
      Tensor kc = g.state("cache.k." + std::to_string(l), {1, c.kv_heads, tmax, c.head_dim});
      Tensor vc = g.state("cache.v." + std::to_string(l), {1, c.kv_heads, tmax, c.head_dim});
      Tensor kn = kv_cache_write(kc, rope_at(k, pos, c.theta), pos), vn = kv_cache_write(vc, v, pos);
      g.assign(kc, kn);
      g.assign(vc, vn);
      a = cached_attention(rope_at(q, pos, c.theta), kn, vn, pos);
    } else {
      a = attention(rope(q, c.theta), rope(k, c.theta), v, true);
    }
    x = x + lin(g, merge(a), p + "self_attn.o_proj", c.heads * c.head_dim, c.dim);
    h = rms_norm(x, g.parameter(p + "post_attention_layernorm.weight", {c.dim}, Init{Init::ones}), c.eps);
    Tensor gate = lin(g, h, p + "mlp.gate_proj", c.dim, c.ffn), up = lin(g, h, p + "mlp.up_proj", c.dim, c.ffn);
    x = x + lin(g, swiglu(gate, up), p + "mlp.down_proj", c.ffn, c.dim);
  }
  x = rms_norm(x, g.parameter("model.norm.weight", {c.dim}, Init{Init::ones}), c.eps);
  g.output(named("logits", s), matmul(reshape(x, {s, c.dim}), emb, false, true));  // tied head
  return g;
}

// Row `r` of logits [rows, vocab]: its argmax and the gap to the runner-up.
inline std::pair<int32_t, float> argmax(const std::vector<float>& logits, int64_t vocab, int64_t r) {
  const float* row = logits.data() + r * vocab;
  int32_t best = 0;
  for (int32_t j = 1; j < int32_t(vocab); ++j)
    if (row[j] > row[best]) best = j;
  float second = -1e30f;
  for (int32_t j = 0; j < int32_t(vocab); ++j)
    if (j != best) second = std::max(second, row[j]);
  return {best, row[best] - second};
}

// Tokens generated greedily after a prompt, the logits each choice came from, and the smallest
// top-1 margin among them.
struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> rows;
  float margin = 1e30f;
  void take(const std::vector<float>& logits, int64_t vocab, int64_t r) {
    rows.emplace_back(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
    auto [token, gap] = argmax(logits, vocab, r);
    margin = std::min(margin, gap);
    tokens.push_back(token);
  }
};

// Recomputing the whole window (`full`: lm_graph over `total` tokens) for every token; the
// padding after the last token does not reach its logits (causal attention).
inline Greedy greedy_full(Session& s, size_t full, const Lm& c, const std::vector<int32_t>& prompt, int64_t total) {
  Greedy g;
  g.tokens = prompt;
  while (int64_t(g.tokens.size()) < total) {
    std::vector<int32_t> ids = g.tokens;
    ids.resize(size_t(total), 0);
    s.set(named("ids", total), ids);
    s.run(full);
    g.take(s.get(named("logits", total)), c.vocab, int64_t(g.tokens.size()) - 1);
  }
  return g;
}

// Through the cache: the prompt in one prefill at position 0, then a decode step per token.
inline Greedy greedy_cached(Session& s, size_t prefill, size_t decode, const Lm& c, const std::vector<int32_t>& prompt,
                            int64_t total) {
  Greedy g;
  g.tokens = prompt;
  const int64_t n = int64_t(prompt.size());
  s.set(named("ids", n), prompt);
  s.set("pos", std::vector<int32_t>{0});
  s.run(prefill);
  g.take(s.get(named("logits", n)), c.vocab, n - 1);
  while (int64_t(g.tokens.size()) < total) {
    s.set(named("ids", 1), std::vector<int32_t>{g.tokens.back()});
    s.set("pos", std::vector<int32_t>{int32_t(g.tokens.size()) - 1});
    s.run(decode);
    g.take(s.get(named("logits", 1)), c.vocab, 0);
  }
  return g;
}

inline double largest_difference(const Greedy& a, const Greedy& b) {
  double worst = 0;
  for (size_t t = 0; t < a.rows.size() && t < b.rows.size(); ++t)
    for (size_t j = 0; j < a.rows[t].size(); ++j)
      worst = std::max(worst, double(std::abs(a.rows[t][j] - b.rows[t][j])));
  return a.rows.size() == b.rows.size() ? worst : 1e30;
}

// ---- Sequences at their own positions: one write, attention and rotation over a batch whose
// position input holds one position per sequence, -1 marking an idle sequence. Inputs "q"
// [B, H, S, D], "rows" [B, Hkv, S, D], "x" [B, H, S, D], "pos" i32 [B]; states "cache.k",
// "cache.v" [B, Hkv, Tmax, D]; outputs "y" (attention over the written caches) and "r"
// (rope_at of x). Checked against formulas in double written here.
struct Batch {
  int64_t b = 3, h = 4, hkv = 2, s = 2, d = 8, tmax = 12;
  double theta = 100;
};

inline Graph batch_graph(const Batch& m) {
  Graph g;
  Tensor q = g.input("q", {m.b, m.h, m.s, m.d});
  Tensor rows = g.input("rows", {m.b, m.hkv, m.s, m.d});
  Tensor pos = g.input("pos", {m.b}, DType::i32);
  Tensor kc = g.state("cache.k", {m.b, m.hkv, m.tmax, m.d});
  Tensor vc = g.state("cache.v", {m.b, m.hkv, m.tmax, m.d});
  Tensor kn = kv_cache_write(kc, rows, pos), vn = kv_cache_write(vc, rows * 0.5, pos);
  g.assign(kc, kn);
  g.assign(vc, vn);
  g.output("y", cached_attention(q, kn, vn, pos));
  g.output("r", rope_at(g.input("x", {m.b, m.h, m.s, m.d}), pos, m.theta));
  return g;
}

struct BatchExpected {
  std::vector<double> cache_k, y, r;
};

// What the batch program must produce from caches `k0` and `v0` (its states before the run).
inline BatchExpected batch_expected(const Batch& m, const std::vector<int32_t>& pos, const std::vector<float>& q,
                                    const std::vector<float>& rows, const std::vector<float>& x,
                                    const std::vector<float>& k0, const std::vector<float>& v0) {
  BatchExpected e;
  std::vector<double> k(k0.begin(), k0.end()), v(v0.begin(), v0.end());
  for (int64_t b = 0; b < m.b; ++b) {
    if (pos[size_t(b)] < 0) continue;  // idle: nothing written
    for (int64_t h = 0; h < m.hkv; ++h)
      for (int64_t i = 0; i < m.s * m.d; ++i) {
        const size_t at = size_t(((b * m.hkv + h) * m.tmax + pos[size_t(b)]) * m.d + i);
        k[at] = rows[size_t((b * m.hkv + h) * m.s * m.d + i)];
        v[at] = double(rows[size_t((b * m.hkv + h) * m.s * m.d + i)]) * 0.5;
      }
  }
  e.cache_k = k;
  e.y.assign(size_t(m.b * m.h * m.s * m.d), 0.0);  // idle sequences' rows stay zero
  e.r.resize(x.size());
  for (int64_t b = 0; b < m.b; ++b)
    for (int64_t h = 0; h < m.h; ++h)
      for (int64_t i = 0; i < m.s; ++i) {
        const int64_t row = (b * m.h + h) * m.s + i, p = pos[size_t(b)], kvh = b * m.hkv + h / (m.h / m.hkv);
        for (int64_t j = 0; j < m.d / 2; ++j) {  // an idle sequence rotates as position 0
          const double a = double(std::max<int64_t>(p, 0) + i) * std::pow(m.theta, -2.0 * double(j) / double(m.d));
          const double x1 = x[size_t(row * m.d + j)], x2 = x[size_t(row * m.d + j + m.d / 2)];
          e.r[size_t(row * m.d + j)] = x1 * std::cos(a) - x2 * std::sin(a);
          e.r[size_t(row * m.d + j + m.d / 2)] = x2 * std::cos(a) + x1 * std::sin(a);
        }
        if (p < 0) continue;
        std::vector<double> w;
        for (int64_t t = 0; t <= p + i; ++t) {
          double dot = 0;
          for (int64_t c = 0; c < m.d; ++c) dot += double(q[size_t(row * m.d + c)]) * k[size_t((kvh * m.tmax + t) * m.d + c)];
          w.push_back(dot / std::sqrt(double(m.d)));
        }
        const double mx = *std::max_element(w.begin(), w.end());
        double sum = 0;
        for (double& z : w) sum += (z = std::exp(z - mx));
        for (int64_t c = 0; c < m.d; ++c) {
          double acc = 0;
          for (int64_t t = 0; t <= p + i; ++t) acc += w[size_t(t)] * v[size_t((kvh * m.tmax + t) * m.d + c)];
          e.y[size_t(row * m.d + c)] = acc / sum;
        }
      }
  return e;
}

// Fills the caches with values in [-1, 1], runs the batch program at `pos` and compares the
// written cache (copies: exact), the attention rows and the rotated rows within `tol`.
inline void check_batch(Session& s, const Batch& m, const std::vector<int32_t>& pos, uint32_t seed, double tol) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  auto draw = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& z : v) z = u(rng);
    return v;
  };
  const auto k0 = draw(m.b * m.hkv * m.tmax * m.d), v0 = draw(m.b * m.hkv * m.tmax * m.d);
  const auto q = draw(m.b * m.h * m.s * m.d), rows = draw(m.b * m.hkv * m.s * m.d), x = draw(m.b * m.h * m.s * m.d);
  s.set("cache.k", k0);
  s.set("cache.v", v0);
  s.set("q", q);
  s.set("rows", rows);
  s.set("x", x);
  s.set("pos", pos);
  s.run();
  const BatchExpected e = batch_expected(m, pos, q, rows, x, k0, v0);
  const auto k = s.get("cache.k"), y = s.get("y"), r = s.get("r");
  for (size_t i = 0; i < k.size(); ++i) ASSERT_EQ(double(k[i]), e.cache_k[i]) << "cache element " << i;
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], e.y[i], tol) << "attention element " << i;
  for (size_t i = 0; i < r.size(); ++i) ASSERT_NEAR(r[i], e.r[i], tol) << "rotated element " << i;
}

}  // namespace meganeura::kv_case
