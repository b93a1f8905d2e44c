// cos: The cosine.
#include <cmath>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Cos {
  template <class T>
  static T f(T x, T, T) {
    return std::cos(x);
  }
};

Grads rule(const VjpArgs& a) { return {-(a.g * sin(a.x()))}; }

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(cos)
MEGANEURA_UNARY_OP(cos, Cos, .grad = GradKind::vjp, .flops = 8, .glsl = "cos(x)", .transcendental = true, .vjp = rule)
