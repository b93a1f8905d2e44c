#include "meganeura/autodiff.h"

#include <optional>
#include <stdexcept>

#include "graph/internal.h"
#include "graph/op_table.h"

namespace meganeura {
std::vector<Tensor> vjp(Tensor y, Tensor seed, const std::vector<Tensor>& wrt) {
  Graph& G = *y.graph;
  if (seed.graph != &G || seed.shape() != y.shape()) {
    throw std::invalid_argument("[autodiff] seed " + shape_str(seed.shape()) + " does not match output " +
                                shape_str(y.shape()));
  }
  const NodeId end = y.id + 1;
  const graph_internal::PinnedScope pinned(G);  // gradients stay f32 under every precision contract
  // needs[i]: some wrt node reaches node i, so its gradient is worth computing.
  std::vector<char> needs(end, 0);
  for (const Tensor& w : wrt) {
    if (w.graph != &G) throw std::invalid_argument("[autodiff] wrt tensor from another graph");
    if (w.id < end) needs[w.id] = 1;
  }
  // Backward-only and forward-only ops propagate the need too, so that differentiating through
  // one is caught below instead of silently giving zero.
  for (NodeId i = 0; i < end; ++i) {  // inputs precede their users: one pass suffices
    GradKind kind = op_info(G.node(i).op).grad;
    if (needs[i] || (kind != GradKind::vjp && kind != GradKind::backward_only && kind != GradKind::forward_only))
      continue;
    for (NodeId k : G.node(i).inputs) needs[i] |= needs[k];
  }
  std::vector<std::optional<Tensor>> grads(end);
  grads[y.id] = seed;
  for (NodeId i = end; i-- > 0;) {
    if (!grads[i] || !needs[i]) continue;
    const Node& n = G.node(i);
    if (op_info(n.op).grad == GradKind::backward_only) {
      throw std::invalid_argument("[autodiff] cannot differentiate through " + std::string(op_name(n.op)) + " (node " +
                                  std::to_string(i) + "): it only appears inside gradients and has no gradient rule");
    }
    if (op_info(n.op).grad == GradKind::forward_only) {
      throw std::invalid_argument("[autodiff] cannot differentiate through " + std::string(op_name(n.op)) + " (node " +
                                  std::to_string(i) + "): it is for inference only and has no gradient rule");
    }
    const OpInfo& info = op_info(n.op);
    if (info.grad != GradKind::vjp) continue;
    const ops::Grads gi = info.vjp(ops::VjpArgs{G, n, G.tensor(i), *grads[i]});
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      NodeId src = n.inputs[k];
      if (k >= gi.size() || !gi[k] || !needs[src]) continue;
      grads[src] = grads[src] ? add(*grads[src], *gi[k]) : *gi[k];
    }
  }
  std::vector<Tensor> out;
  for (const Tensor& w : wrt) {
    if (w.id < end && grads[w.id]) {
      out.push_back(*grads[w.id]);
    } else {
      out.push_back(broadcast_to(G.constant({0.0}, {}, w.dtype()), w.shape()));
    }
  }
  return out;
}

std::vector<Tensor> grad(Tensor loss, const std::vector<Tensor>& wrt) {
  if (loss.rank() != 0) {
    throw std::invalid_argument("[autodiff] loss must be a scalar, got " + shape_str(loss.shape()));
  }
  const graph_internal::PinnedScope pinned(*loss.graph);
  return vjp(loss, loss.graph->constant({1.0}, {}, loss.dtype()), wrt);
}

}  // namespace meganeura
