// sqrt: The square root.
#include <cmath>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Sqrt {
  template <class T>
  static T f(T x, T, T) {
    return std::sqrt(x);
  }
};

Grads rule(const VjpArgs& a) { return {a.g / (a.y * 2.0)}; }

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(sqrt)
MEGANEURA_UNARY_OP(sqrt, Sqrt, .grad = GradKind::vjp, .flops = 1, .glsl = "sqrt(x)", .transcendental = true,
                   .vjp = rule)
