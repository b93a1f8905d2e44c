// rsqrt: 1 / sqrt(x).
#include <cmath>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Rsqrt {
  template <class T>
  static T f(T x, T, T) {
    return T(1) / std::sqrt(x);
  }
};

Grads rule(const VjpArgs& a) { return {a.g * (a.y * a.y * a.y) * -0.5}; }

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(rsqrt)
MEGANEURA_UNARY_OP(rsqrt, Rsqrt, .grad = GradKind::vjp, .flops = 1, .glsl = "1.0 / sqrt(x)", .transcendental = true,
                   .vjp = rule)
