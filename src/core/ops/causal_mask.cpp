// causal_mask: scores [..., sq, sk] with every key after its query's position set to `fill`.
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {
Grads rule(const VjpArgs& a) { return {causal_mask(a.g, 0.0)}; }
}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::causal_mask(Tensor x, double fill) {
  if (x.rank() < 2) ops::fail(Op::causal_mask, "expects rank >= 2, got " + shape_str(x.shape()));
  return ops::unary_node(Op::causal_mask, x, MaskAttrs{fill});
}

MEGANEURA_OP(causal_mask, .family = OpFamily::seq, .arity = 1, .grad = GradKind::vjp, .cost = cost::none(),
             .cpu = CpuKernel::sequence, .vulkan = VkKernel::sequence, .vjp = rule, .inplace_input = 0)
