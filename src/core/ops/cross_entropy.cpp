// softmax_cross_entropy: the mean over rows of -log softmax(logits)[target], rows whose target
// is ignore_index left out; its backward, (softmax - one_hot) * g / counted rows, appears only
// inside gradients.
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

Grads rule(const VjpArgs& a) {
  return {softmax_cross_entropy_backward(a.x(), a.in(1), a.g, a.attrs<OneHotAttrs>().ignore_index), std::nullopt};
}
OpCost forward_flops(const CostArgs& c) { return {5 * c.in_numel(0), 0}; }

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::softmax_cross_entropy(Tensor logits, Tensor targets, int64_t ignore_index) {
  constexpr Op op = Op::softmax_cross_entropy;
  Graph& g = ops::graph_of(op, {logits, targets});
  ops::require_float(op, logits);
  if (targets.dtype() != DType::i32)
    ops::fail(op, "targets must be i32, got " + std::string(dtype_name(targets.dtype())));
  if (logits.rank() != 2 || targets.rank() != 1 || targets.dim(0) != logits.dim(0)) {
    ops::fail(op, "expects logits [N,C] and targets [N], got " + shape_str(logits.shape()) + " and " +
                      shape_str(targets.shape()));
  }
  return graph_internal::add_node(g, op, OneHotAttrs{logits.dim(1), ignore_index}, {logits.id, targets.id},
                                  TensorType{logits.dtype(), {}});
}

meganeura::Tensor meganeura::softmax_cross_entropy_backward(Tensor logits, Tensor targets, Tensor g,
                                                            int64_t ignore_index) {
  constexpr Op op = Op::softmax_cross_entropy_backward;
  Graph& G = ops::graph_of(op, {logits, targets, g});
  if (g.rank() != 0 || logits.rank() != 2) ops::fail(op, "expects logits [N,C] and a scalar upstream gradient");
  return graph_internal::add_node(G, op, OneHotAttrs{logits.dim(1), ignore_index}, {logits.id, targets.id, g.id},
                                  logits.type());
}

MEGANEURA_OP(softmax_cross_entropy, .family = OpFamily::index, .arity = 2, .grad = GradKind::vjp,
             .cost = cost::of(forward_flops), .cpu = CpuKernel::index, .vulkan = VkKernel::workload, .vjp = rule)
MEGANEURA_OP(softmax_cross_entropy_backward, .family = OpFamily::index, .arity = 3, .grad = GradKind::backward_only,
             .cost = cost::per_output(5), .cpu = CpuKernel::index, .vulkan = VkKernel::workload,
             .checked_by = Op::softmax_cross_entropy)
