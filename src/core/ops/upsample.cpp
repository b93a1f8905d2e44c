// upsample_nearest2x: each pixel of an NCHW tensor repeated over a 2x2 block.
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {
Grads rule(const VjpArgs& a) { return {avg_pool2d(a.g, 2, 2) * 4.0}; }
}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::upsample_nearest2x(Tensor x) {
  constexpr Op op = Op::upsample_nearest2x;
  if (x.rank() != 4) ops::fail(op, "expects [N,C,H,W], got " + shape_str(x.shape()));
  ops::require_float(op, x);
  Shape s = x.shape();
  s[2] *= 2;
  s[3] *= 2;
  return graph_internal::add_node(*x.graph, op, NoAttrs{}, {x.id}, TensorType{x.dtype(), s});
}

MEGANEURA_OP(upsample_nearest2x, .family = OpFamily::pool, .arity = 1, .grad = GradKind::vjp, .cost = cost::none(),
             .cpu = CpuKernel::pool, .vulkan = VkKernel::pool, .vjp = rule)
