// softplus: log(1 + e^x), a smooth relu. Computed as x itself above 20 (where e^-x is below
// f32 and f64 resolution relative to x) and through log1p below, so neither tail loses digits.
#include <cmath>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Softplus {
  template <class T>
  static T f(T x, T, T) {
    return x > T(20) ? x : std::log1p(std::exp(x));
  }
};

Grads rule(const VjpArgs& a) { return {a.g * sigmoid(a.x())}; }

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(softplus)
// GLSL has no log1p: below -15, log(1 + e^x) = e^x to f32 precision.
MEGANEURA_UNARY_OP(softplus, Softplus, .grad = GradKind::vjp, .flops = 8,
                   .glsl = "x > 20.0 ? x : (x < -15.0 ? exp(x) : log(1.0 + exp(x)))", .transcendental = true,
                   .vjp = rule)
