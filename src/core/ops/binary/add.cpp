// add: a + b, broadcasting.
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Add {
  template <class T>
  static T f(T a, T b) {
    return a + b;
  }
};

Grads rule(const VjpArgs& a) { return {sum_to(a.g, a.x().shape()), sum_to(a.g, a.in(1).shape())}; }

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_BINARY_BUILDER(add)
MEGANEURA_BINARY_OP(add, Add, .grad = GradKind::vjp, .glsl = "a + b", .vjp = rule)
