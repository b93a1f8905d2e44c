// positive_mask: 1 where x > 0, else 0 (zero gradient).
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct PositiveMask {
  template <class T>
  static T f(T x, T, T) {
    return x > T(0) ? T(1) : T(0);
  }
};

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_UNARY_BUILDER(positive_mask)
MEGANEURA_UNARY_OP(positive_mask, PositiveMask, .grad = GradKind::none, .flops = 1, .glsl = "x > 0.0 ? 1.0 : 0.0",
                   .transcendental = false)
