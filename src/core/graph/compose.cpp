// User-level ops written as compositions of primitives: their gradients come for free and a
// backend only has to implement the primitives (fusion passes may later match these patterns).
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "graph/internal.h"
#include "meganeura/graph.h"
#include "ops/op_def.h"

namespace meganeura {

Tensor layer_norm(Tensor x, std::optional<Tensor> gamma, std::optional<Tensor> beta, double eps) {
  for (auto& p : {gamma, beta}) {
    if (p && p->shape() != Shape{x.dim(-1)}) {
      throw std::invalid_argument("[layer_norm] scale/shift must be (" + std::to_string(x.dim(-1)) + "), got " +
                                  shape_str(p->shape()) + " for input " + shape_str(x.shape()));
    }
  }
  Tensor xc = x - mean(x, {-1}, true);
  Tensor y = xc * rsqrt(mean(xc * xc, {-1}, true) + eps);
  if (gamma) y = y * *gamma;
  if (beta) y = y + *beta;
  return y;
}

Tensor rms_norm(Tensor x, std::optional<Tensor> gamma, double eps) {
  if (gamma && gamma->shape() != Shape{x.dim(-1)}) {
    throw std::invalid_argument("[rms_norm] scale must be (" + std::to_string(x.dim(-1)) + "), got " +
                                shape_str(gamma->shape()) + " for input " + shape_str(x.shape()));
  }
  Tensor y = x * rsqrt(mean(x * x, {-1}, true) + eps);
  return gamma ? y * *gamma : y;
}

Tensor group_norm(Tensor x, int64_t groups, std::optional<Tensor> gamma, std::optional<Tensor> beta, double eps) {
  if (x.rank() < 2 || groups < 1 || x.dim(1) % groups) {
    throw std::invalid_argument("[group_norm] channels of " + shape_str(x.shape()) + " not divisible into " +
                                std::to_string(groups) + " groups");
  }
  int64_t c = x.dim(1);
  Shape affine_shape(size_t(x.rank()), 1);
  affine_shape[1] = c;
  for (auto& p : {gamma, beta}) {
    if (p && p->shape() != Shape{c}) {
      throw std::invalid_argument("[group_norm] scale/shift must be (" + std::to_string(c) + "), got " +
                                  shape_str(p->shape()));
    }
  }
  Tensor y = layer_norm(reshape(x, {x.dim(0), groups, -1}), std::nullopt, std::nullopt, eps);
  y = reshape(y, x.shape());
  if (gamma) y = y * reshape(*gamma, affine_shape);
  if (beta) y = y + reshape(*beta, affine_shape);
  return y;
}

Tensor swiglu(Tensor gate, Tensor up) { return silu(gate) * up; }

// From primitives every backend has, so it runs where the logits are: the row's maximum, a mask
// of the entries equal to it, each weighted by (n - index) so that the largest weight marks the
// first of them, and n minus that weight. Indices are exact in f32 below 2^24.
Tensor argmax(Tensor x) {
  if (x.rank() < 1 || x.dim(-1) < 1 || x.dim(-1) > (int64_t(1) << 24)) {
    throw std::invalid_argument("[argmax] needs a last axis of 1 to 2^24 entries, got " + shape_str(x.shape()));
  }
  const int64_t n = x.dim(-1);
  Tensor weight = arange(*x.graph, n, double(n), -1.0, x.dtype());  // n, n - 1, ..., 1
  Tensor first = max(equal(x, max(x, {-1}, true)) * weight, {-1});
  return cast(affine(first, -1.0, double(n)), DType::i32);
}

// Score matrices of at least this many entries per head (256 KiB in f32) go through the tiled
// attention op, whose memory does not grow with Sq x Sk; below it the composition (two
// matmuls and a softmax) is small, runs on GEMMs and fuses on every backend.
constexpr int64_t kTiledAttentionMin = 65536;

Tensor attention(Tensor q, Tensor k, Tensor v, bool causal, std::optional<double> scale) {
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4) {
    throw std::invalid_argument("[attention] expects q, k, v of rank 4 [B,H,S,D], got " + shape_str(q.shape()) + ", " +
                                shape_str(k.shape()) + ", " + shape_str(v.shape()));
  }
  int64_t b = q.dim(0), hq = q.dim(1), hkv = k.dim(1), sk = k.dim(2);
  if (k.dim(0) != b || v.dim(0) != b || v.dim(1) != hkv || v.dim(2) != sk || k.dim(3) != q.dim(3) || hkv < 1 ||
      hq % hkv) {
    throw std::invalid_argument("[attention] incompatible shapes q " + shape_str(q.shape()) + ", k " +
                                shape_str(k.shape()) + ", v " + shape_str(v.shape()) +
                                " (query heads must be a multiple of key/value heads)");
  }
  // Grouped-query: query head h uses key/value head h / (hq / hkv). Folding the group into the
  // query rows ([B, Hkv, G*Sq, D], a view) makes each key/value head one shared matmul operand,
  // so K and V are never copied per query head.
  const int64_t grp = hq / hkv, sq = q.dim(2);
  double s = scale.value_or(1.0 / std::sqrt(double(q.dim(3))));
  if (sq * sk >= kTiledAttentionMin) {
    // Long sequences: one tiled dispatch, no score matrix per head in forward or backward.
    Tensor packed = attention_fused_packed(q, k, v, causal, s);
    const int64_t n = b * hq * sq * v.dim(3);
    return reshape(slice_axis(packed, 0, 0, n), {b, hq, sq, v.dim(3)});
  }
  if (grp == 1) {
    Tensor scores = matmul(q, k, false, true) * s;
    return matmul(softmax(causal ? causal_mask(scores) : scores, -1), v);
  }
  // The mask needs each row's query position, so it sees the group as its own axis; the scale
  // comes after the reshape so that softmax(mask(x * s)) stays one pattern for the passes.
  Tensor qg = reshape(q, {b, hkv, grp * sq, q.dim(3)});
  Tensor scores = reshape(matmul(qg, k, false, true), {b, hkv, grp, sq, sk}) * s;
  Tensor p = softmax(causal ? causal_mask(scores) : scores, -1);
  Tensor out = matmul(reshape(p, {b, hkv, grp * sq, sk}), v);  // [B, Hkv, G*Sq, Dv]
  return reshape(out, {b, hq, sq, v.dim(3)});
}

Tensor cross_entropy(Tensor logits, Tensor targets, int64_t ignore_index) {
  if (logits.rank() != 2 || targets.rank() != 1 || targets.dim(0) != logits.dim(0)) {
    throw std::invalid_argument("[cross_entropy] expects logits [N,C] and targets [N], got " +
                                shape_str(logits.shape()) + " and " + shape_str(targets.shape()));
  }
  return softmax_cross_entropy(logits, targets, ignore_index);
}

Tensor mse(Tensor pred, Tensor target) {
  if (pred.shape() != target.shape()) {
    throw std::invalid_argument("[mse] shapes differ: " + shape_str(pred.shape()) + " and " +
                                shape_str(target.shape()));
  }
  Tensor d = pred - target;
  return mean(d * d);
}

// ---- Thin conveniences over single primitives -----
Tensor operator*(Tensor a, double s) { return affine(a, s, 0); }
Tensor operator+(Tensor a, double s) { return affine(a, 1, s); }

Tensor conv1d(Tensor x, Tensor w, int64_t stride, int64_t pad, int64_t dilation, int64_t groups) {
  if (x.rank() != 3 || w.rank() != 3) {
    throw std::invalid_argument("[conv1d] expects x [N,C,L] and w [O,C/groups,K], got " + shape_str(x.shape()) +
                                " and " + shape_str(w.shape()));
  }
  Conv2dOptions o;
  o.stride_w = stride;
  o.pad_w = pad;
  o.dilation_w = dilation;
  o.groups = groups;
  Tensor y = conv2d(reshape(x, {x.dim(0), x.dim(1), 1, x.dim(2)}), reshape(w, {w.dim(0), w.dim(1), 1, w.dim(2)}), o);
  return reshape(y, {y.dim(0), y.dim(1), y.dim(3)});
}

Tensor global_avg_pool2d(Tensor x) {
  if (x.rank() != 4) throw std::invalid_argument("[global_avg_pool2d] expects [N,C,H,W], got " + shape_str(x.shape()));
  return mean(x, {2, 3});
}

Tensor transpose(Tensor x, int64_t a, int64_t b) {
  std::vector<int64_t> perm(size_t(x.rank()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[size_t(ops::norm_axis(Op::permute, a, x.rank()))],
            perm[size_t(ops::norm_axis(Op::permute, b, x.rank()))]);
  return permute(x, perm);
}

Tensor slice_axis(Tensor x, int64_t axis, int64_t start, int64_t end) {
  const int64_t a = ops::norm_axis(Op::slice, axis, x.rank());
  std::vector<int64_t> s(size_t(x.rank()), 0);
  Shape e = x.shape();
  s[size_t(a)] = start;
  e[size_t(a)] = end;
  return slice(x, s, e);
}

Tensor sum_to(Tensor x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const size_t lead = x.shape().size() - shape.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < x.shape().size(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && x.shape()[i] != 1)) axes.push_back(int64_t(i));
  }
  Tensor s = axes.empty() ? x : sum(x, axes, true);
  return reshape(s, shape);
}

Tensor arange(Graph& g, int64_t n, double start, double step, DType dtype) {
  if (n < 0) throw std::invalid_argument("[arange] length must be non-negative, got " + std::to_string(n));
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = start + double(i) * step;
  return g.constant(std::move(values), {n}, dtype);
}

}  // namespace meganeura
