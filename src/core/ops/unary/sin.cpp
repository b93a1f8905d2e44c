// sin: The sine.
#include <cmath>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Sin {
  template <class T>
  static T f(T x, T, T) {
    return std::sin(x);
  }
};

Grads rule(const VjpArgs& a) { return {a.g * cos(a.x())}; }

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(sin)
MEGANEURA_UNARY_OP(sin, Sin, .grad = GradKind::vjp, .flops = 8, .glsl = "sin(x)", .transcendental = true, .vjp = rule)
