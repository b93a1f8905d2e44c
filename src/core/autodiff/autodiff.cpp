#include "meganeura/autodiff.h"

#include <numeric>
#include <optional>
#include <stdexcept>

#include "graph/op_table.h"

namespace meganeura {
namespace {

using Grads = std::vector<std::optional<Tensor>>;  // one per input of the node

// The vjp rules: x, y are the node's first input and output, g the upstream gradient.
Grads rule(Graph& G, const Node& n, Tensor y, Tensor g) {
  auto in = [&](size_t k) { return G.tensor(n.inputs.at(k)); };
  Tensor x = in(0);
  switch (n.op) {
    case Op::copy: return {g};
    case Op::neg: return {-g};
    case Op::exp: return {g * y};
    case Op::log: return {g / x};
    case Op::sqrt: return {g / (y * 2.0)};
    case Op::rsqrt: return {g * (y * y * y) * -0.5};
    case Op::abs: return {g * sign(x)};
    case Op::tanh: return {g * affine(y * y, -1, 1)};
    case Op::sigmoid: return {g * (y * affine(y, -1, 1))};
    case Op::relu: return {g * positive_mask(x)};
    case Op::gelu_tanh: return {g * gelu_grad(x, true)};
    case Op::gelu_erf: return {g * gelu_grad(x, false)};
    case Op::silu: {
      Tensor s = sigmoid(x);
      return {g * (s * (x * affine(s, -1, 1) + 1.0))};
    }
    case Op::affine: return {g * std::get<AffineAttrs>(n.attrs).scale};
    case Op::cast: return {cast(g, x.dtype())};
    case Op::add: return {sum_to(g, x.shape()), sum_to(g, in(1).shape())};
    case Op::sub: return {sum_to(g, x.shape()), sum_to(-g, in(1).shape())};
    case Op::mul: return {sum_to(g * in(1), x.shape()), sum_to(g * x, in(1).shape())};
    case Op::div: return {sum_to(g / in(1), x.shape()), sum_to(-(g * y / in(1)), in(1).shape())};
    case Op::sum:
    case Op::mean:
    case Op::max: {
      const auto& a = std::get<ReduceAttrs>(n.attrs);
      Shape keep = x.shape();
      double count = 1;
      for (int64_t ax : a.axes) {
        count *= double(keep[size_t(ax)]);
        keep[size_t(ax)] = 1;
      }
      Tensor gk = reshape(g, keep);
      if (n.op == Op::sum) return {broadcast_to(gk, x.shape())};
      if (n.op == Op::mean) return {broadcast_to(gk * (1.0 / count), x.shape())};
      return {equal(x, reshape(y, keep)) * gk};
    }
    case Op::softmax: {
      int64_t ax = std::get<AxisAttrs>(n.attrs).axis;
      return {y * (g - sum(g * y, {ax}, true))};
    }
    case Op::log_softmax: {
      int64_t ax = std::get<AxisAttrs>(n.attrs).axis;
      return {g - exp(y) * sum(g, {ax}, true)};
    }
    case Op::matmul: {
      const auto& a = std::get<MatmulAttrs>(n.attrs);
      Tensor b = in(1);
      Tensor ga = a.trans_a ? matmul(b, g, a.trans_b, true) : matmul(g, b, false, !a.trans_b);
      Tensor gb = a.trans_b ? matmul(g, x, true, a.trans_a) : matmul(x, g, !a.trans_a, false);
      return {sum_to(ga, x.shape()), sum_to(gb, b.shape())};
    }
    case Op::conv2d: {
      ConvAttrs ai = std::get<ConvAttrs>(n.attrs), aw = ai;
      ai.grad_shape = x.shape();
      aw.grad_shape = in(1).shape();
      return {conv2d_backward_input(g, in(1), ai), conv2d_backward_weight(x, g, aw)};
    }
    case Op::max_pool2d: return {max_pool2d_backward(x, g, std::get<PoolAttrs>(n.attrs))};
    case Op::avg_pool2d: {
      PoolAttrs a = std::get<PoolAttrs>(n.attrs);
      a.grad_shape = x.shape();
      return {avg_pool2d_backward(g, a)};
    }
    case Op::upsample_nearest2x: return {avg_pool2d(g, 2, 2) * 4.0};
    case Op::reshape: return {reshape(g, x.shape())};
    case Op::permute: {
      const auto& p = std::get<PermuteAttrs>(n.attrs).perm;
      std::vector<int64_t> inv(p.size());
      for (size_t i = 0; i < p.size(); ++i) inv[size_t(p[i])] = int64_t(i);
      return {permute(g, inv)};
    }
    case Op::slice: {
      const auto& s = std::get<SliceAttrs>(n.attrs);
      std::vector<int64_t> after(s.ends.size());
      for (size_t i = 0; i < after.size(); ++i) after[i] = x.shape()[i] - s.ends[i];
      return {pad(g, s.starts, after)};
    }
    case Op::pad: {
      const auto& p = std::get<PadAttrs>(n.attrs);
      std::vector<int64_t> ends(p.before.size());
      for (size_t i = 0; i < ends.size(); ++i) ends[i] = p.before[i] + x.shape()[i];
      return {slice(g, p.before, ends)};
    }
    case Op::concat: {
      int64_t ax = std::get<AxisAttrs>(n.attrs).axis, off = 0;
      Grads r;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        int64_t len = in(k).dim(ax);
        r.push_back(slice_axis(g, ax, off, off + len));
        off += len;
      }
      return r;
    }
    case Op::broadcast_to: return {sum_to(g, x.shape())};
    case Op::embedding: return {embedding_backward(g, in(1), x.dim(0)), std::nullopt};
    case Op::embedding_backward: return {embedding(g, in(1)), std::nullopt};
    case Op::rope: {
      const auto& a = std::get<RopeAttrs>(n.attrs);
      return {rope(g, a.theta, !a.inverse)};
    }
    case Op::causal_mask: return {causal_mask(g, 0.0)};
    case Op::sin: return {g * cos(x)};
    case Op::cos: return {-(g * sin(x))};
    case Op::maximum: {  // ties go to a (as in the kernel, which keeps a unless a < b)
      Tensor b_wins = less(x, in(1));
      Tensor zero = G.constant({0.0}, {}, g.dtype());
      return {sum_to(where(b_wins, zero, g), x.shape()), sum_to(where(b_wins, g, zero), in(1).shape())};
    }
    case Op::where: {
      Tensor zero = G.constant({0.0}, {}, g.dtype());
      return {std::nullopt, sum_to(where(x, g, zero), in(1).shape()), sum_to(where(x, zero, g), in(2).shape())};
    }
    case Op::gather: {
      const auto& a = std::get<GatherAttrs>(n.attrs);
      return {gather_backward(g, in(1), a.axis, a.size), std::nullopt};
    }
    case Op::gather_backward: return {gather(g, std::get<GatherAttrs>(n.attrs).axis, in(1)), std::nullopt};
    case Op::attention_fused: {
      const auto& a = std::get<AttentionAttrs>(n.attrs);
      Tensor packed = attention_fused_backward(x, in(1), in(2), y, g, a);
      const int64_t nq = numel(a.q), nk = numel(a.k), nv = numel(a.v);
      return {reshape(slice_axis(packed, 0, 0, nq), a.q), reshape(slice_axis(packed, 0, nq, nq + nk), a.k),
              reshape(slice_axis(packed, 0, nq + nk, nq + nk + nv), a.v)};
    }
    case Op::softmax_cross_entropy:
      return {softmax_cross_entropy_backward(x, in(1), g, std::get<OneHotAttrs>(n.attrs).ignore_index), std::nullopt};
    default: throw std::logic_error("[autodiff] no vjp rule for " + std::string(op_name(n.op)));
  }
}

}  // namespace

std::vector<Tensor> vjp(Tensor y, Tensor seed, const std::vector<Tensor>& wrt) {
  Graph& G = *y.graph;
  if (seed.graph != &G || seed.shape() != y.shape()) {
    throw std::invalid_argument("[autodiff] seed " + shape_str(seed.shape()) + " does not match output " +
                                shape_str(y.shape()));
  }
  const NodeId end = y.id + 1;
  // needs[i]: some wrt node reaches node i, so its gradient is worth computing.
  std::vector<char> needs(end, 0);
  for (const Tensor& w : wrt) {
    if (w.graph != &G) throw std::invalid_argument("[autodiff] wrt tensor from another graph");
    if (w.id < end) needs[w.id] = 1;
  }
  // Backward-only ops propagate the need too, so that differentiating through one is caught
  // below instead of silently giving zero.
  for (NodeId i = 0; i < end; ++i) {  // inputs precede their users: one pass suffices
    GradKind kind = op_info(G.node(i).op).grad;
    if (needs[i] || (kind != GradKind::vjp && kind != GradKind::backward_only)) continue;
    for (NodeId k : G.node(i).inputs) needs[i] |= needs[k];
  }
  std::vector<std::optional<Tensor>> grads(end);
  grads[y.id] = seed;
  for (NodeId i = end; i-- > 0;) {
    if (!grads[i] || !needs[i]) continue;
    const Node& n = G.node(i);
    if (op_info(n.op).grad == GradKind::backward_only) {
      throw std::invalid_argument("[autodiff] cannot differentiate through " + std::string(op_name(n.op)) + " (node " +
                                  std::to_string(i) + "): it only appears inside gradients and has no gradient rule");
    }
    if (op_info(n.op).grad != GradKind::vjp) continue;
    Grads gi = rule(G, n, G.tensor(i), *grads[i]);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      NodeId src = n.inputs[k];
      if (k >= gi.size() || !gi[k] || !needs[src]) continue;
      grads[src] = grads[src] ? add(*grads[src], *gi[k]) : *gi[k];
    }
  }
  std::vector<Tensor> out;
  for (const Tensor& w : wrt) {
    if (w.id < end && grads[w.id]) {
      out.push_back(*grads[w.id]);
    } else {
      out.push_back(broadcast_to(G.constant({0.0}, {}, w.dtype()), w.shape()));
    }
  }
  return out;
}

std::vector<Tensor> grad(Tensor loss, const std::vector<Tensor>& wrt) {
  if (loss.rank() != 0) {
    throw std::invalid_argument("[autodiff] loss must be a scalar, got " + shape_str(loss.shape()));
  }
  return vjp(loss, loss.graph->constant({1.0}, {}, loss.dtype()), wrt);
}

}  // namespace meganeura
