// The key/value cache of autoregressive decoding: kv_cache_write puts a step's key (or value)
// rows into the cache at a runtime position, cached_attention attends over the cache prefix,
// rope_at rotates rows at absolute positions. The position is an i32 tensor read when the
// program runs, so one program serves every decode step; it holds one position for all the
// sequences of the batch or one per sequence, -1 marking a sequence that takes no part. The cache ops are for inference
// only (GradKind::forward_only: autodiff refuses them); rope_at differentiates like rope.
#include <cmath>

#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

Grads rope_at_rule(const VjpArgs& a) {
  RopeAttrs r = a.attrs<RopeAttrs>();
  r.inverse = !r.inverse;
  return {rope_at_scaled(a.g, a.in(1), r), std::nullopt};
}

// Scores and P V over every cache position (an upper bound: the prefix used depends on pos).
OpCost attention_flops(const CostArgs& c) {
  const Shape &q = c.in_shape(0), &k = c.in_shape(1), &v = c.in_shape(2);
  return {2.0 * double(q[0] * q[1] * q[2] * k[2]) * double(q[3] + v[3]), 0};
}

// One position for every sequence, or one per sequence (`batch` of them, the leading axis).
void require_position(Op op, Tensor pos, int64_t batch) {
  const int64_t n = pos.type().numel();
  if (pos.dtype() != DType::i32 || (n != 1 && (n != batch || pos.rank() != 1))) {
    ops::fail(op, "position must be an i32 vector of 1 or " + std::to_string(batch) +
                      " elements (one per sequence), got " + std::string(dtype_name(pos.dtype())) +
                      shape_str(pos.shape()));
  }
}

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::kv_cache_write(Tensor cache, Tensor rows, Tensor pos) {
  constexpr Op op = Op::kv_cache_write;
  Graph& g = ops::graph_of(op, {cache, rows, pos});
  ops::require_float(op, cache);
  ops::require_position(op, pos, cache.rank() ? cache.dim(0) : 1);
  if (cache.rank() != 4 || rows.rank() != 4 || rows.dtype() != cache.dtype() || rows.dim(0) != cache.dim(0) ||
      rows.dim(1) != cache.dim(1) || rows.dim(3) != cache.dim(3) || rows.dim(2) > cache.dim(2)) {
    ops::fail(op, "rows " + shape_str(rows.shape()) + " do not fit cache " + shape_str(cache.shape()) +
                      " (expects [B, H, S, D] rows for a [B, H, Tmax, D] cache, S <= Tmax)");
  }
  return graph_internal::add_node(g, op, NoAttrs{}, {cache.id, rows.id, pos.id}, cache.type());
}

meganeura::Tensor meganeura::cached_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor pos, int64_t window,
                                              std::optional<double> scale) {
  constexpr Op op = Op::cached_attention;
  Graph& g = ops::graph_of(op, {q, k_cache, v_cache, pos});
  ops::require_float(op, q);
  ops::require_position(op, pos, q.rank() ? q.dim(0) : 1);
  const Tensor &k = k_cache, &v = v_cache;
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4 || k.dim(0) != q.dim(0) || v.dim(0) != q.dim(0) ||
      v.dim(1) != k.dim(1) || v.dim(2) != k.dim(2) || k.dim(3) != q.dim(3) || q.dim(1) % k.dim(1) ||
      q.dim(2) > k.dim(2) || q.dtype() != k.dtype() || q.dtype() != v.dtype()) {
    ops::fail(op, "incompatible q " + shape_str(q.shape()) + ", k cache " + shape_str(k.shape()) + ", v cache " +
                      shape_str(v.shape()));
  }
  if (window < 0) ops::fail(op, "window must be >= 0 (0: no window), got " + std::to_string(window));
  const double s = scale.value_or(1.0 / std::sqrt(double(q.dim(3))));
  return graph_internal::add_node(g, op, CachedAttentionAttrs{s, window}, {q.id, k.id, v.id, pos.id},
                                  TensorType{q.dtype(), {q.dim(0), q.dim(1), q.dim(2), v.dim(3)}});
}

meganeura::Tensor meganeura::rope_at(Tensor x, Tensor offset, double theta, bool inverse) {
  RopeAttrs a;
  a.theta = theta;
  a.inverse = inverse;
  return rope_at_scaled(x, offset, a);
}

meganeura::Tensor meganeura::rope_at_scaled(Tensor x, Tensor offset, const RopeAttrs& a) {
  constexpr Op op = Op::rope_at;
  Graph& g = ops::graph_of(op, {x, offset});
  ops::require_float(op, x);
  ops::require_position(op, offset, x.rank() >= 3 ? x.dim(0) : 1);
  ops::require_rope(op, x, a);
  return graph_internal::add_node(g, op, a, {x.id, offset.id}, x.type());
}

// The cache is read first and written in place (its memory is the state's when the result is
// assigned to it); only the rows at pos..pos+S-1 change.
MEGANEURA_OP(kv_cache_write, .family = OpFamily::seq, .arity = 3, .grad = GradKind::forward_only, .cost = cost::none(),
             .cpu = CpuKernel::sequence, .vulkan = VkKernel::kv_cache, .inplace_input = 0)
MEGANEURA_OP(cached_attention, .family = OpFamily::seq, .arity = 4, .grad = GradKind::forward_only,
             .cost = cost::of(ops::attention_flops), .cpu = CpuKernel::sequence, .vulkan = VkKernel::kv_cache)
MEGANEURA_OP(rope_at, .family = OpFamily::seq, .arity = 2, .grad = GradKind::vjp, .cost = cost::per_output(4),
             .cpu = CpuKernel::sequence, .vulkan = VkKernel::kv_cache, .vjp = ops::rope_at_rule)
