// attention_fused: softmax(q k^T * scale [+ causal mask]) v over [b, heads, seq, dim], keys and
// values shared by groups of query heads (grouped-query attention). Its output packs the
// result and each query row's log-sum-exp, [out | lse], which its backward reads; the
// backward packs [dq | dk | dv] and appears only inside gradients.
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

Grads rule(const VjpArgs& a) {
  const auto& at = a.attrs<AttentionAttrs>();
  Tensor packed = attention_fused_backward(a.x(), a.in(1), a.in(2), a.y, a.g, at);
  const int64_t nq = numel(at.q), nk = numel(at.k), nv = numel(at.v);
  return {reshape(slice_axis(packed, 0, 0, nq), at.q), reshape(slice_axis(packed, 0, nq, nq + nk), at.k),
          reshape(slice_axis(packed, 0, nq + nk, nq + nk + nv), at.v)};
}

// Forward: scores and P V; backward: scores again, dP, dQ, dK and dV.
OpCost flops(const CostArgs& c) {
  const auto& a = c.attrs<AttentionAttrs>();
  const double pairs = double(a.q[0] * a.q[1] * a.q[2] * a.k[2]);
  const double d = double(a.q[3]), dv = double(a.v[3]);
  return {2.0 * pairs * (c.node.op == Op::attention_fused ? d + dv : 3 * d + 2 * dv), 0};
}

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::attention_fused_packed(Tensor q, Tensor k, Tensor v, bool causal, double scale) {
  constexpr Op op = Op::attention_fused;
  Graph& g = ops::graph_of(op, {q, k, v});
  ops::require_float(op, q);
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4 || k.dim(0) != q.dim(0) || v.dim(0) != q.dim(0) ||
      v.dim(1) != k.dim(1) || v.dim(2) != k.dim(2) || k.dim(3) != q.dim(3) || q.dim(1) % k.dim(1) ||
      q.dtype() != k.dtype() || q.dtype() != v.dtype()) {
    ops::fail(op,
              "incompatible q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " + shape_str(v.shape()));
  }
  AttentionAttrs a{causal, scale, q.shape(), k.shape(), v.shape()};
  const int64_t rows = q.dim(0) * q.dim(1) * q.dim(2);
  return graph_internal::add_node(g, op, a, {q.id, k.id, v.id}, TensorType{q.dtype(), {rows * v.dim(3) + rows}});
}

meganeura::Tensor meganeura::attention_fused_backward(Tensor q, Tensor k, Tensor v, Tensor packed, Tensor grad_packed,
                                                      const AttentionAttrs& a) {
  constexpr Op op = Op::attention_fused_backward;
  Graph& g = ops::graph_of(op, {q, k, v, packed, grad_packed});
  if (q.shape() != a.q || k.shape() != a.k || v.shape() != a.v || packed.shape() != grad_packed.shape()) {
    ops::fail(op, "operands do not match the forward attention");
  }
  const int64_t n = q.type().numel() + k.type().numel() + v.type().numel();
  return graph_internal::add_node(g, op, a, {q.id, k.id, v.id, packed.id, grad_packed.id}, TensorType{q.dtype(), {n}});
}

MEGANEURA_OP(attention_fused, .family = OpFamily::seq, .arity = 3, .grad = GradKind::vjp, .cost = cost::of(flops),
             .cpu = CpuKernel::sequence, .vulkan = VkKernel::attention, .vjp = rule)
MEGANEURA_OP(attention_fused_backward, .family = OpFamily::seq, .arity = 5, .grad = GradKind::backward_only,
             .cost = cost::of(flops), .cpu = CpuKernel::sequence, .vulkan = VkKernel::attention,
             .checked_by = Op::attention_fused)
