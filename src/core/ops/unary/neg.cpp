// neg: -x.
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Neg {
  template <class T>
  static T f(T x, T, T) {
    return -x;
  }
};

Grads rule(const VjpArgs& a) { return {-a.g}; }

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(neg)
MEGANEURA_UNARY_OP(neg, Neg, .grad = GradKind::vjp, .flops = 1, .glsl = "-x", .transcendental = false, .vjp = rule)
