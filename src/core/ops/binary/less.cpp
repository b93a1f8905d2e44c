// less: 1 where a < b, else 0 (zero gradient).
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Less {
  template <class T>
  static T f(T a, T b) {
    return a < b ? T(1) : T(0);
  }
};

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_BINARY_BUILDER(less)
MEGANEURA_BINARY_OP(less, Less, .grad = GradKind::none, .glsl = "a < b ? 1.0 : 0.0")
