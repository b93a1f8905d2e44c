// pad: x with zeros before and after it along each axis.
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {
Grads rule(const VjpArgs& a) {
  const auto& p = a.attrs<PadAttrs>();
  std::vector<int64_t> ends(p.before.size());
  for (size_t i = 0; i < ends.size(); ++i) ends[i] = p.before[i] + a.x().shape()[i];
  return {slice(a.g, p.before, ends)};
}
}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::pad(Tensor x, std::vector<int64_t> before, std::vector<int64_t> after) {
  constexpr Op op = Op::pad;
  Graph& g = ops::graph_of(op, {x});
  if (int64_t(before.size()) != x.rank() || int64_t(after.size()) != x.rank())
    ops::fail(op, "needs padding per axis of " + shape_str(x.shape()));
  Shape out = x.shape();
  for (size_t i = 0; i < out.size(); ++i) {
    if (before[i] < 0 || after[i] < 0) ops::fail(op, "padding must be non-negative");
    out[i] += before[i] + after[i];
  }
  return graph_internal::add_node(g, op, PadAttrs{before, after}, {x.id}, TensorType{x.dtype(), out});
}

MEGANEURA_OP(pad, .family = OpFamily::movement, .arity = 1, .grad = GradKind::vjp, .cost = cost::none(),
             .cpu = CpuKernel::movement, .vulkan = VkKernel::movement, .vjp = rule)
