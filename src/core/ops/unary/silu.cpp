// silu: x * sigmoid(x).
#include <cmath>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Silu {
  template <class T>
  static T f(T x, T, T) {
    return x / (T(1) + std::exp(-x));
  }
};

Grads rule(const VjpArgs& a) {
  Tensor s = sigmoid(a.x());
  return {a.g * (s * (a.x() * affine(s, -1, 1) + 1.0))};
}

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(silu)
MEGANEURA_UNARY_OP(silu, Silu, .grad = GradKind::vjp, .flops = 8, .glsl = "x / (1.0 + exp(-x))", .transcendental = true,
                   .vjp = rule)
