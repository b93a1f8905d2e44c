// hardswish: x * relu6(x + 3) / 6, the piecewise-quadratic swish of MobileNetV3: 0 below -3,
// x above 3, x (x + 3) / 6 between.
#include <algorithm>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Hardswish {
  template <class T>
  static T f(T x, T, T) {
    return x * std::clamp(x + T(3), T(0), T(6)) / T(6);
  }
};

// d/dx: 0 below -3, x / 3 + 1/2 between, 1 above 3 (at the kinks, the value from the left).
Grads rule(const VjpArgs& a) {
  Tensor x = a.x();
  Tensor above = positive_mask(affine(x, 1, -3));
  Tensor inside = positive_mask(affine(x, 1, 3)) - above;
  return {a.g * (inside * affine(x, 1.0 / 3, 0.5) + above)};
}

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(hardswish)
MEGANEURA_UNARY_OP(hardswish, Hardswish, .grad = GradKind::vjp, .flops = 5,
                   .glsl = "x * clamp(x + 3.0, 0.0, 6.0) / 6.0", .transcendental = false, .vjp = rule)
