// log: The natural logarithm.
#include <cmath>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Log {
  template <class T>
  static T f(T x, T, T) {
    return std::log(x);
  }
};

Grads rule(const VjpArgs& a) { return {a.g / a.x()}; }

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(log)
MEGANEURA_UNARY_OP(log, Log, .grad = GradKind::vjp, .flops = 1, .glsl = "log(x)", .transcendental = true, .vjp = rule)
