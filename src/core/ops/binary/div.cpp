// div: a / b, broadcasting.
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Div {
  template <class T>
  static T f(T a, T b) {
    return a / b;
  }
};

Grads rule(const VjpArgs& a) {
  return {sum_to(a.g / a.in(1), a.x().shape()), sum_to(-(a.g * a.y / a.in(1)), a.in(1).shape())};
}

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_BINARY_BUILDER(div)
MEGANEURA_BINARY_OP(div, Div, .grad = GradKind::vjp, .glsl = "a / b", .vjp = rule)
