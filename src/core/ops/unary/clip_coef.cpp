// clip_coef: min(1, max_norm / (norm + 1e-6)), the factor of global-norm gradient clipping.
#include <algorithm>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct ClipCoef {
  template <class T>
  static T f(T norm, T max_norm, T) {
    return std::min(T(1), max_norm / (norm + T(1e-6)));
  }
};

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::clip_coef(Tensor norm, double max_norm) {
  if (norm.rank() != 0) ops::fail(Op::clip_coef, "expects a scalar norm, got " + shape_str(norm.shape()));
  if (!(max_norm > 0)) ops::fail(Op::clip_coef, "max_norm must be positive");
  return ops::unary_node(Op::clip_coef, norm, ClipAttrs{max_norm});
}

// A scalar: priced as no work, like the optimizer's other scalars.
MEGANEURA_OP(clip_coef, .family = OpFamily::unary, .arity = 1, .grad = GradKind::none, .cost = cost::none(),
             .cpu = CpuKernel::unary, .vulkan = VkKernel::unary, .inplace_input = 0,
             .elementwise = unary_fn<ClipCoef>({.glsl = "min(1.0, p0 / (x + 1e-6))", .transcendental = false}))
