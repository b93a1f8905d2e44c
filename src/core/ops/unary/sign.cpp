// sign: -1, 0 or 1 by the sign of x (zero gradient).
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Sign {
  template <class T>
  static T f(T x, T, T) {
    return x > T(0) ? T(1) : x < T(0) ? T(-1) : T(0);
  }
};

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(sign)
MEGANEURA_UNARY_OP(sign, Sign, .grad = GradKind::none, .flops = 1, .glsl = "x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0)",
                   .transcendental = false)
