// slice: the box [starts, ends) of x, one range per axis.
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {
Grads rule(const VjpArgs& a) {
  const auto& s = a.attrs<SliceAttrs>();
  std::vector<int64_t> after(s.ends.size());
  for (size_t i = 0; i < after.size(); ++i) after[i] = a.x().shape()[i] - s.ends[i];
  return {pad(a.g, s.starts, after)};
}
}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::slice(Tensor x, std::vector<int64_t> starts, std::vector<int64_t> ends) {
  constexpr Op op = Op::slice;
  Graph& g = ops::graph_of(op, {x});
  if (int64_t(starts.size()) != x.rank() || int64_t(ends.size()) != x.rank())
    ops::fail(op, "needs a start and end per axis of " + shape_str(x.shape()));
  Shape out;
  for (size_t i = 0; i < starts.size(); ++i) {
    if (starts[i] < 0 || starts[i] > ends[i] || ends[i] > x.shape()[i]) {
      ops::fail(op, "range [" + std::to_string(starts[i]) + "," + std::to_string(ends[i]) +
                        ") out of bounds for axis " + std::to_string(i) + " of " + shape_str(x.shape()));
    }
    out.push_back(ends[i] - starts[i]);
  }
  if (out == x.shape()) return x;
  return graph_internal::add_node(g, op, SliceAttrs{starts, ends}, {x.id}, TensorType{x.dtype(), out});
}

MEGANEURA_OP(slice, .family = OpFamily::movement, .arity = 1, .grad = GradKind::vjp, .cost = cost::none(),
             .cpu = CpuKernel::movement, .vulkan = VkKernel::movement, .vjp = rule)
