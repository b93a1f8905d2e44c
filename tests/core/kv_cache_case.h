// A prefill and a decode program over one attention layer with a key/value cache, and the
// same layer over the whole sequence at once: the CPU and Vulkan cache tests run them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meganeura/graph.h"

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

}  // namespace meganeura::kv_case
