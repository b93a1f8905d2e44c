// tanh: The hyperbolic tangent.
#include <cmath>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Tanh {
  template <class T>
  static T f(T x, T, T) {
    return std::tanh(x);
  }
};

Grads rule(const VjpArgs& a) { return {a.g * affine(a.y * a.y, -1, 1)}; }

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(tanh)
MEGANEURA_UNARY_OP(tanh, Tanh, .grad = GradKind::vjp, .flops = 8, .glsl = "stable_tanh(x)", .transcendental = true,
                   .vjp = rule)
