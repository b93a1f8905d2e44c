// gather: slices of x along one axis picked by i32 indices; gather_backward scatters (adds)
// them back, and each is the other's gradient.
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

void require_indices(Op op, Tensor indices) {
  if (indices.dtype() != DType::i32) fail(op, "indices must be i32, got " + std::string(dtype_name(indices.dtype())));
}

Grads rule(const VjpArgs& a) {
  const auto& g = a.attrs<GatherAttrs>();
  return {gather_backward(a.g, a.in(1), g.axis, g.size), std::nullopt};
}
Grads backward_rule(const VjpArgs& a) { return {gather(a.g, a.attrs<GatherAttrs>().axis, a.in(1)), std::nullopt}; }

constexpr OpSpec spec(VjpFn vjp) {
  return OpSpec{.family = OpFamily::index,
                .arity = 2,
                .grad = GradKind::vjp,
                .cost = cost::none(),
                .cpu = CpuKernel::index,
                .vulkan = VkKernel::workload,
                .vjp = vjp};
}

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::gather(Tensor x, int64_t axis, Tensor indices) {
  constexpr Op op = Op::gather;
  Graph& g = ops::graph_of(op, {x, indices});
  ops::require_indices(op, indices);
  if (indices.rank() != 1) ops::fail(op, "indices must be one-dimensional, got " + shape_str(indices.shape()));
  const int64_t a = axis < 0 ? axis + x.rank() : axis;
  if (a < 0 || a >= x.rank())
    ops::fail(op, "axis " + std::to_string(axis) + " out of range for " + shape_str(x.shape()));
  Shape out = x.shape();
  out[size_t(a)] = indices.dim(0);
  return graph_internal::add_node(g, op, GatherAttrs{a, x.dim(a)}, {x.id, indices.id}, TensorType{x.dtype(), out});
}

meganeura::Tensor meganeura::gather_backward(Tensor dy, Tensor indices, int64_t axis, int64_t size) {
  constexpr Op op = Op::gather_backward;
  Graph& g = ops::graph_of(op, {dy, indices});
  ops::require_indices(op, indices);
  if (axis < 0 || axis >= dy.rank() || indices.rank() != 1 || dy.dim(axis) != indices.dim(0) || size < 1) {
    ops::fail(op, "gradient " + shape_str(dy.shape()) + " does not match indices " + shape_str(indices.shape()) +
                      " on axis " + std::to_string(axis));
  }
  Shape out = dy.shape();
  out[size_t(axis)] = size;
  return graph_internal::add_node(g, op, GatherAttrs{axis, size}, {dy.id, indices.id}, TensorType{dy.dtype(), out});
}

MEGANEURA_DEFINE_OP_(gather, spec(rule))
MEGANEURA_DEFINE_OP_(gather_backward, spec(backward_rule))
