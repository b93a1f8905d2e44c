// Reductions fed by a fused program (fused_reduce): over contiguous axes, or any axes where
// the backend walks them.
#include "graph/op_table.h"
#include "passes/fusion/fuser.h"

namespace meganeura::passes {

namespace {
bool contiguous_axes(const std::vector<int64_t>& axes) {
  for (size_t k = 1; k < axes.size(); ++k) {
    if (axes[k] != axes[k - 1] + 1) return false;
  }
  return !axes.empty();
}
}  // namespace

bool is_reduce_host(const Graph& g, const Node& n, bool strided) {
  if ((n.op != Op::sum && n.op != Op::mean && n.op != Op::max) || !all_f32(g, n)) return false;
  const auto& axes = std::get<ReduceAttrs>(n.attrs).axes;
  if (contiguous_axes(axes)) return true;
  return strided && !axes.empty() && g.node(n.inputs[0]).type.shape.size() <= 8;
}

bool Fuser::reduce_host(NodeId id) const {
  const Node& n = g_.node(id);
  return is_reduce_host(g_, n, strided_) && inl_[n.inputs[0]] == 1;
}

}  // namespace meganeura::passes
