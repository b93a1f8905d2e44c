// where: a where the condition is non-zero, else b (all three broadcast together).
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {
Grads rule(const VjpArgs& a) {
  Tensor zero = a.graph.constant({0.0}, {}, a.g.dtype());
  return {std::nullopt, sum_to(where(a.x(), a.g, zero), a.in(1).shape()),
          sum_to(where(a.x(), zero, a.g), a.in(2).shape())};
}
}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::where(Tensor cond, Tensor a, Tensor b) {
  constexpr Op op = Op::where;
  Graph& g = ops::graph_of(op, {cond, a, b});
  ops::require_float(op, a);
  if (cond.dtype() != a.dtype() || a.dtype() != b.dtype())
    ops::fail(op, "condition and both branches must share a float dtype");
  const Shape out = ops::broadcast_shapes(op, {cond.shape(), a.shape(), b.shape()});
  return graph_internal::add_node(g, op, NoAttrs{}, {cond.id, a.id, b.id}, TensorType{a.dtype(), out});
}

MEGANEURA_OP(where, .family = OpFamily::index, .arity = 3, .grad = GradKind::vjp, .cost = cost::none(),
             .cpu = CpuKernel::index, .vulkan = VkKernel::workload, .vjp = rule)
