// top_k: the k largest entries of each row of the last axis, largest first, the lower index
// first among equal values and NaN above every number (so a NaN in a row is always seen). One
// output packs the values and their indices ([..., 2k], indices as exact values of x's dtype),
// which top_k slices into values and i32 indices. Sampling draws from these candidates without
// reading the vocabulary row back. Inference only: autodiff refuses it.
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

constexpr int64_t kMaxK = 1024, kMaxRow = int64_t(1) << 24;

// Each row is read once per radix pass (four), compared, and its candidates sorted.
OpCost flops(const CostArgs& c) {
  const Shape& x = c.in_shape(0);
  const double n = c.in_numel(0), k = double(c.attrs<TopKAttrs>().k), rows = n / double(x.back());
  return {4 * n + rows * k * k, 3 * n * double(sizeof(float))};
}

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::top_k_packed(Tensor x, int64_t k) {
  constexpr Op op = Op::top_k;
  Graph& g = ops::graph_of(op, {x});
  ops::require_float(op, x);
  if (x.rank() < 1 || x.dim(-1) < 1 || x.dim(-1) > ops::kMaxRow)
    ops::fail(op, "needs a last axis of 1 to 2^24 entries, got " + shape_str(x.shape()));
  if (k < 1 || k > ops::kMaxK || k > x.dim(-1)) {
    ops::fail(op, "k must be in [1, min(1024, " + std::to_string(x.dim(-1)) + ")], got " + std::to_string(k));
  }
  Shape out = x.shape();
  out.back() = 2 * k;
  return graph_internal::add_node(g, op, TopKAttrs{k}, {x.id}, TensorType{x.dtype(), out});
}

meganeura::TopK meganeura::top_k(Tensor x, int64_t k) {
  Tensor packed = top_k_packed(x, k);
  return {slice_axis(packed, -1, 0, k), cast(slice_axis(packed, -1, k, 2 * k), DType::i32)};
}

MEGANEURA_OP(top_k, .family = OpFamily::index, .arity = 1, .grad = GradKind::forward_only, .cost = cost::of(flops),
             .cpu = CpuKernel::index, .vulkan = VkKernel::workload)
