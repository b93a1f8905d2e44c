// copy and detach: the identity, any dtype. detach stops the gradient.
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

Grads rule(const VjpArgs& a) { return {a.g}; }

Tensor identity_node(Op op, Tensor x) {
  return graph_internal::add_node(graph_of(op, {x}), op, NoAttrs{}, {x.id}, x.type());
}

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::copy(Tensor x) { return ops::identity_node(Op::copy, x); }
meganeura::Tensor meganeura::detach(Tensor x) { return ops::identity_node(Op::detach, x); }

MEGANEURA_UNARY_OP(copy, Identity, .grad = GradKind::vjp, .flops = 1, .glsl = "x", .transcendental = false, .vjp = rule)
MEGANEURA_UNARY_OP(detach, Identity, .grad = GradKind::none, .flops = 1, .glsl = "x", .transcendental = false)
