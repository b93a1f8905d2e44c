// sum, mean and max over any axes (sorted, each once), with or without the reduced axes kept.
#include <algorithm>
#include <numeric>

#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

Tensor reduce(Op op, Tensor x, std::vector<int64_t> axes, bool keepdims) {
  Graph& g = graph_of(op, {x});
  require_float(op, x);
  if (axes.empty()) {
    axes.resize(size_t(x.rank()));
    std::iota(axes.begin(), axes.end(), 0);
  }
  for (auto& a : axes) a = norm_axis(op, a, x.rank());
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) fail(op, "repeated axis");
  Shape out;
  for (int64_t i = 0; i < x.rank(); ++i) {
    const bool reduced = std::binary_search(axes.begin(), axes.end(), i);
    if (!reduced)
      out.push_back(x.shape()[size_t(i)]);
    else if (keepdims)
      out.push_back(1);
  }
  return graph_internal::add_node(g, op, ReduceAttrs{axes, keepdims}, {x.id}, TensorType{x.dtype(), out});
}

// The gradient arrives over the kept shape: broadcast it back over the reduced axes.
Grads rule(const VjpArgs& a) {
  const auto& attrs = a.attrs<ReduceAttrs>();
  Shape keep = a.x().shape();
  double count = 1;
  for (int64_t ax : attrs.axes) {
    count *= double(keep[size_t(ax)]);
    keep[size_t(ax)] = 1;
  }
  Tensor gk = reshape(a.g, keep);
  if (a.node.op == Op::sum) return {broadcast_to(gk, a.x().shape())};
  if (a.node.op == Op::mean) return {broadcast_to(gk * (1.0 / count), a.x().shape())};
  return {equal(a.x(), reshape(a.y, keep)) * gk};  // max: to every element equal to the maximum
}

OpCost reads_input(const CostArgs& c) { return {c.in_numel(0), 0}; }

constexpr OpSpec reduction() {
  return OpSpec{.family = OpFamily::reduce,
                .arity = 1,
                .grad = GradKind::vjp,
                .cost = cost::of(reads_input),
                .cpu = CpuKernel::reduce,
                .vulkan = VkKernel::reduce,
                .vjp = rule};
}

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::sum(Tensor x, std::vector<int64_t> axes, bool keepdims) {
  return ops::reduce(Op::sum, x, std::move(axes), keepdims);
}
meganeura::Tensor meganeura::mean(Tensor x, std::vector<int64_t> axes, bool keepdims) {
  return ops::reduce(Op::mean, x, std::move(axes), keepdims);
}
meganeura::Tensor meganeura::max(Tensor x, std::vector<int64_t> axes, bool keepdims) {
  return ops::reduce(Op::max, x, std::move(axes), keepdims);
}

MEGANEURA_DEFINE_OP_(sum, reduction())
MEGANEURA_DEFINE_OP_(mean, reduction())
MEGANEURA_DEFINE_OP_(max, reduction())
