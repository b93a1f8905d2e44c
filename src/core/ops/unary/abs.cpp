// abs: |x|.
#include <cmath>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Abs {
  template <class T>
  static T f(T x, T, T) {
    return std::abs(x);
  }
};

Grads rule(const VjpArgs& a) { return {a.g * sign(a.x())}; }

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(abs)
MEGANEURA_UNARY_OP(abs, Abs, .grad = GradKind::vjp, .flops = 1, .glsl = "abs(x)", .transcendental = false, .vjp = rule)
