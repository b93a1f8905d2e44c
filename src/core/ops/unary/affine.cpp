// affine: scale * x + shift (the scalar arithmetic of `x * 2.0`, `x + 1.0`).
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

struct Affine {
  template <class T>
  static T f(T x, T scale, T shift) {
    return scale * x + shift;
  }
};

Grads rule(const VjpArgs& a) { return {a.g * a.attrs<AffineAttrs>().scale}; }

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::affine(Tensor x, double scale, double shift) {
  return ops::unary_node(Op::affine, x, AffineAttrs{scale, shift});
}

MEGANEURA_UNARY_OP(affine, Affine, .grad = GradKind::vjp, .flops = 1, .glsl = "p0 * x + p1", .transcendental = false,
                   .vjp = rule)
