// sigmoid: 1 / (1 + e^-x).
#include <cmath>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Sigmoid {
  template <class T>
  static T f(T x, T, T) {
    return T(1) / (T(1) + std::exp(-x));
  }
};

Grads rule(const VjpArgs& a) { return {a.g * (a.y * affine(a.y, -1, 1))}; }

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(sigmoid)
MEGANEURA_UNARY_OP(sigmoid, Sigmoid, .grad = GradKind::vjp, .flops = 8, .glsl = "1.0 / (1.0 + exp(-x))",
                   .transcendental = true, .vjp = rule)
