// concat: any number of tensors joined along one axis (equal elsewhere).
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {
Grads rule(const VjpArgs& a) {
  const int64_t ax = a.attrs<AxisAttrs>().axis;
  int64_t off = 0;
  Grads r;
  for (size_t k = 0; k < a.node.inputs.size(); ++k) {
    const int64_t len = a.in(k).dim(ax);
    r.push_back(slice_axis(a.g, ax, off, off + len));
    off += len;
  }
  return r;
}
}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::concat(std::vector<Tensor> xs, int64_t axis) {
  using ops::fail;
  constexpr Op op = Op::concat;
  if (xs.empty()) fail(op, "needs at least one input");
  if (xs.size() == 1) return xs[0];
  Graph& g = ops::graph_of(op, {xs[0]});
  const int64_t a = ops::norm_axis(op, axis, xs[0].rank());
  Shape out = xs[0].shape();
  out[size_t(a)] = 0;
  std::vector<NodeId> ids;
  for (const Tensor& t : xs) {
    if (t.graph != &g) fail(op, "inputs come from different graphs");
    const Shape s = t.shape();
    if (s.size() != out.size() || t.dtype() != xs[0].dtype()) fail(op, "inputs differ in rank or dtype");
    for (size_t i = 0; i < s.size(); ++i) {
      if (int64_t(i) != a && s[i] != out[i])
        fail(op, "shapes " + shape_str(xs[0].shape()) + " and " + shape_str(s) + " differ off the concat axis");
    }
    out[size_t(a)] += s[size_t(a)];
    ids.push_back(t.id);
  }
  return graph_internal::add_node(g, op, AxisAttrs{a}, ids, TensorType{xs[0].dtype(), out});
}

MEGANEURA_OP(concat, .family = OpFamily::movement, .arity = -1, .grad = GradKind::vjp, .cost = cost::none(),
             .cpu = CpuKernel::movement, .vulkan = VkKernel::movement, .vjp = rule)
