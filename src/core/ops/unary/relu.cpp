// relu: max(x, 0).
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Relu {
  template <class T>
  static T f(T x, T, T) {
    return x > T(0) ? x : T(0);
  }
};

Grads rule(const VjpArgs& a) { return {a.g * positive_mask(a.x())}; }

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(relu)
MEGANEURA_UNARY_OP(relu, Relu, .grad = GradKind::vjp, .flops = 1, .glsl = "x > 0.0 ? x : 0.0", .transcendental = false,
                   .vjp = rule)
