// reshape: the same elements in a new shape (one -1 is inferred). The planner makes it a view
// of its input's memory; only a reshape that is a program output is copied.
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {
Grads rule(const VjpArgs& a) { return {reshape(a.g, a.x().shape())}; }
}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::reshape(Tensor x, Shape shape) {
  using ops::fail;
  constexpr Op op = Op::reshape;
  Graph& g = ops::graph_of(op, {x});
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) fail(op, "more than one -1 in " + shape_str(shape));
      infer = int64_t(i);
    } else if (shape[i] < 0) {
      fail(op, "negative dimension in " + shape_str(shape));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.type().numel() % known)
      fail(op, "cannot infer -1 in " + shape_str(shape) + " from " + shape_str(x.shape()));
    shape[size_t(infer)] = x.type().numel() / known;
  }
  if (numel(shape) != x.type().numel()) fail(op, "cannot reshape " + shape_str(x.shape()) + " to " + shape_str(shape));
  if (shape == x.shape()) return x;
  return graph_internal::add_node(g, op, ShapeAttrs{shape}, {x.id}, TensorType{x.dtype(), shape});
}

MEGANEURA_OP(reshape, .family = OpFamily::movement, .arity = 1, .grad = GradKind::vjp, .cost = cost::none(),
             .cpu = CpuKernel::movement, .vulkan = VkKernel::movement, .vjp = rule, .inplace_input = 0)
