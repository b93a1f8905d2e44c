// Layers shared by the workload builders, each creating its parameters under a name prefix in
// the checkpoint layout the workloads use (Linear weights [out, in], convolution weights
// [out, in, kh, kw], biases separate).
#pragma once

#include <cmath>
#include <string>

#include "meganeura/graph.h"

namespace meganeura::models::parts {

inline Tensor param(Graph& g, const std::string& name, Shape s, Init init) {
  return g.parameter(name, std::move(s), init);
}
inline Init normal(double std) { return Init{Init::normal, std}; }
inline Init ones() { return Init{Init::ones}; }
inline Init zeros() { return Init{Init::zeros}; }

// y = x W^T (+ b) over the last axis; W [out, in] as in torch.nn.Linear.
inline Tensor linear(Graph& g, Tensor x, const std::string& prefix, int64_t in, int64_t out, bool bias,
                     double std = 0.02) {
  Tensor y = matmul(x, param(g, prefix + ".weight", {out, in}, normal(std)), false, true);
  return bias ? y + param(g, prefix + ".bias", {out}, zeros()) : y;
}

inline Tensor channel_bias(Tensor y, Tensor b) {
  Shape s(size_t(y.rank()), 1);
  s[1] = b.dim(0);
  return y + reshape(b, s);
}

// 2-D convolution with weight [out, in, k, k] and an optional bias; He-normal initialisation.
inline Tensor conv(Graph& g, Tensor x, const std::string& prefix, int64_t in, int64_t out, int64_t k, int64_t stride,
                   int64_t pad, bool bias) {
  Tensor w = param(g, prefix + ".weight", {out, in, k, k}, normal(std::sqrt(2.0 / double(in * k * k))));
  Conv2dOptions o;
  o.stride_h = o.stride_w = stride;
  o.pad_h = o.pad_w = pad;
  Tensor y = conv2d(x, w, o);
  return bias ? channel_bias(y, param(g, prefix + ".bias", {out}, zeros())) : y;
}

inline Tensor layer_norm_p(Graph& g, Tensor x, const std::string& prefix, int64_t dim, double eps = 1e-5) {
  return layer_norm(x, param(g, prefix + ".weight", {dim}, ones()), param(g, prefix + ".bias", {dim}, zeros()), eps);
}

inline Tensor group_norm_p(Graph& g, Tensor x, const std::string& prefix, int64_t channels, int64_t groups,
                           double eps = 1e-5) {
  return group_norm(x, groups, param(g, prefix + ".weight", {channels}, ones()),
                    param(g, prefix + ".bias", {channels}, zeros()), eps);
}

// Llama's SwiGLU MLP: down(silu(gate(h)) * up(h)), no biases.
inline Tensor swiglu_mlp(Graph& g, Tensor h, const std::string& p, int64_t dim, int64_t ffn) {
  Tensor gate = linear(g, h, p + "mlp.gate_proj", dim, ffn, false);
  Tensor up = linear(g, h, p + "mlp.up_proj", dim, ffn, false);
  return linear(g, swiglu(gate, up), p + "mlp.down_proj", ffn, dim, false);
}

// [B, S, H*D] -> [B, H, S, D] and back.
inline Tensor split_heads(Tensor t, int64_t heads) {
  const int64_t b = t.dim(0), s = t.dim(1), d = t.dim(2) / heads;
  return permute(reshape(t, {b, s, heads, d}), {0, 2, 1, 3});
}
inline Tensor merge_heads(Tensor t) {
  const int64_t b = t.dim(0), h = t.dim(1), s = t.dim(2), d = t.dim(3);
  return reshape(permute(t, {0, 2, 1, 3}), {b, s, h * d});
}

}  // namespace meganeura::models::parts
