// permute: the axes of x reordered (output axis i is input axis perm[i]).
#include <vector>

#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {
Grads rule(const VjpArgs& a) {
  const auto& p = a.attrs<PermuteAttrs>().perm;
  std::vector<int64_t> inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[size_t(p[i])] = int64_t(i);
  return {permute(a.g, inv)};
}
}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::permute(Tensor x, std::vector<int64_t> perm) {
  constexpr Op op = Op::permute;
  Graph& g = ops::graph_of(op, {x});
  if (int64_t(perm.size()) != x.rank()) ops::fail(op, "permutation has wrong length for " + shape_str(x.shape()));
  std::vector<bool> seen(perm.size());
  Shape out;
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) {
    const int64_t p = ops::norm_axis(op, perm[i], x.rank());
    if (seen[size_t(p)]) ops::fail(op, "axis " + std::to_string(p) + " repeated in permutation");
    seen[size_t(p)] = true;
    perm[i] = p;
    identity &= p == int64_t(i);
    out.push_back(x.shape()[size_t(p)]);
  }
  if (identity) return x;
  return graph_internal::add_node(g, op, PermuteAttrs{perm}, {x.id}, TensorType{x.dtype(), out});
}

MEGANEURA_OP(permute, .family = OpFamily::movement, .arity = 1, .grad = GradKind::vjp, .cost = cost::none(),
             .cpu = CpuKernel::movement, .vulkan = VkKernel::movement, .vjp = rule)
