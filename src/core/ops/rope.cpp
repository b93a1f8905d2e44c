// rope: rotary position embedding over [..., seq, dim] (pairs of the last axis rotated by
// position * theta^(-2i/dim)); its gradient is the inverse rotation.
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {
Grads rule(const VjpArgs& a) {
  const auto& r = a.attrs<RopeAttrs>();
  return {rope(a.g, r.theta, !r.inverse)};
}
}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::rope(Tensor x, double theta, bool inverse) {
  constexpr Op op = Op::rope;
  if (x.rank() < 2 || x.dim(-1) % 2)
    ops::fail(op, "expects [..., seq, dim] with even dim, got " + shape_str(x.shape()));
  return ops::unary_node(op, x, RopeAttrs{theta, inverse});
}

MEGANEURA_OP(rope, .family = OpFamily::seq, .arity = 1, .grad = GradKind::vjp, .cost = cost::per_output(4),
             .cpu = CpuKernel::sequence, .vulkan = VkKernel::sequence, .vjp = rule)
