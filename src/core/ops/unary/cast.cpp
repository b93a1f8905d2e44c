// cast: converts between storage dtypes (f16/bf16 round to nearest even); its kernels convert,
// so its scalar function is the identity on values.
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

Grads rule(const VjpArgs& a) { return {cast(a.g, a.x().dtype())}; }

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::cast(Tensor x, DType to) {
  Graph& g = ops::graph_of(Op::cast, {x});
  if (to == DType::f64) ops::fail(Op::cast, "f64 is reserved for the reference backend's oracle mode");
  return graph_internal::add_node(g, Op::cast, CastAttrs{to}, {x.id}, TensorType{to, x.shape()});
}

MEGANEURA_OP(cast, .family = OpFamily::unary, .arity = 1, .grad = GradKind::vjp, .cost = cost::per_output(1),
             .cpu = CpuKernel::cast, .vulkan = VkKernel::unary, .vjp = rule,
             .elementwise = unary_fn<Identity>({.glsl = "x", .transcendental = false}))
