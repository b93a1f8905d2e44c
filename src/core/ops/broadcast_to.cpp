// broadcast_to: x repeated along its unit (or missing leading) axes to `shape`.
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {
Grads rule(const VjpArgs& a) { return {sum_to(a.g, a.x().shape())}; }
}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::broadcast_to(Tensor x, Shape shape) {
  constexpr Op op = Op::broadcast_to;
  Graph& g = ops::graph_of(op, {x});
  if (ops::broadcast_shapes(op, {x.shape(), shape}) != shape) {
    ops::fail(op, "cannot broadcast " + shape_str(x.shape()) + " to " + shape_str(shape));
  }
  if (shape == x.shape()) return x;
  return graph_internal::add_node(g, op, ShapeAttrs{shape}, {x.id}, TensorType{x.dtype(), shape});
}

MEGANEURA_OP(broadcast_to, .family = OpFamily::movement, .arity = 1, .grad = GradKind::vjp, .cost = cost::none(),
             .cpu = CpuKernel::movement, .vulkan = VkKernel::movement, .vjp = rule)
