// exp: e^x.
#include <cmath>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Exp {
  template <class T>
  static T f(T x, T, T) {
    return std::exp(x);
  }
};

Grads rule(const VjpArgs& a) { return {a.g * a.y}; }

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(exp)
MEGANEURA_UNARY_OP(exp, Exp, .grad = GradKind::vjp, .flops = 1, .glsl = "exp(x)", .transcendental = true, .vjp = rule)
