// maximum: the larger of a and b; ties (and their gradient) go to a.
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Maximum {
  template <class T>
  static T f(T a, T b) {
    return a < b ? b : a;
  }
};

Grads rule(const VjpArgs& a) {
  Tensor b_wins = less(a.x(), a.in(1));
  Tensor zero = a.graph.constant({0.0}, {}, a.g.dtype());
  return {sum_to(where(b_wins, zero, a.g), a.x().shape()), sum_to(where(b_wins, a.g, zero), a.in(1).shape())};
}

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_BINARY_BUILDER(maximum)
MEGANEURA_BINARY_OP(maximum, Maximum, .grad = GradKind::vjp, .glsl = "a < b ? b : a", .vjp = rule)
