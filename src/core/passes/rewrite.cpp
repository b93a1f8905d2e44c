#include "passes/rewrite.h"

#include <optional>
#include <stdexcept>
#include <string>

#include "graph/internal.h"
#include "graph/op_table.h"

namespace meganeura::passes {

Uses::Uses(const Graph& g)
    : count(g.size(), 0), consumers(g.size()), pinned(g.size(), 0), assigned_to(g.size(), kNone) {
  for (NodeId id = 0; id < g.size(); ++id) {
    for (NodeId k : g.node(id).inputs) {
      count[k]++;
      if (consumers[k].empty() || consumers[k].back() != id) consumers[k].push_back(id);
    }
  }
  for (auto& [name, id] : g.outputs()) pinned[id] = 1;
  for (auto& [dst, src] : g.assignments()) {
    pinned[src] = pinned[dst] = 1;
    assigned_to[src] = dst;
  }
}

NodeId Rewriter::copy(NodeId id) {
  const Node& n = src_.node(id);
  std::optional<graph_internal::PinnedScope> pinned;  // the copy keeps Node::pinned
  if (n.pinned) pinned.emplace(dst_);
  NodeId r = 0;
  if (n.op == Op::input)
    r = dst_.input(n.name, n.type.shape, n.type.dtype).id;
  else if (n.op == Op::parameter)
    r = dst_.parameter(n.name, n.type.shape, n.init, n.type.dtype).id;
  else if (n.op == Op::state)
    r = dst_.state(n.name, n.type.shape, n.init, n.type.dtype).id;
  else if (n.op == Op::constant)
    r = dst_.constant(n.const_data, n.type.shape, n.type.dtype).id;
  else
    r = graph_internal::add_node(dst_, n.op, n.attrs, mapped(n.inputs), n.type, n.name).id;
  return map_[id] = r;
}

NodeId Rewriter::replace(NodeId id, Op op, Attrs attrs, const std::vector<NodeId>& inputs) {
  const Node& n = src_.node(id);
  std::optional<graph_internal::PinnedScope> pinned;
  if (n.pinned) pinned.emplace(dst_);
  return map_[id] = graph_internal::add_node(dst_, op, std::move(attrs), mapped(inputs), n.type, n.name).id;
}

Graph Rewriter::finish() {
  for (auto& [name, id] : src_.outputs()) dst_.output(name, dst_.tensor(at(id)));
  for (auto& [d, s] : src_.assignments()) dst_.assign(dst_.tensor(at(d)), dst_.tensor(at(s)));
  return std::move(dst_);
}

NodeId Rewriter::at(NodeId id) const {
  if (map_[id] == kNone) throw std::logic_error("[passes] node %" + std::to_string(id) + " used before it was copied");
  return map_[id];
}

std::vector<NodeId> Rewriter::mapped(const std::vector<NodeId>& ids) const {
  std::vector<NodeId> r;
  for (NodeId k : ids) r.push_back(at(k));
  return r;
}

bool all_f32(const Graph& g, const Node& n) {
  if (n.type.dtype != DType::f32) return false;
  for (NodeId k : n.inputs) {
    if (g.node(k).type.dtype != DType::f32) return false;
  }
  return true;
}

bool last_axis_keepdims_mean(const Node& n) {
  if (n.op != Op::mean) return false;
  const auto& a = std::get<ReduceAttrs>(n.attrs);
  return a.keepdims && a.axes == std::vector<int64_t>{int64_t(n.type.shape.size()) - 1};
}

bool is_pointwise(const Graph& g, const Node& n) {
  const ops::Elementwise& e = op_info(n.op).elementwise;
  const bool ok = (e.unary() && n.op != Op::cast) || e.binary() || n.op == Op::broadcast_to;
  return ok && all_f32(g, n);
}

bool transcendental(Op op) { return op_info(op).elementwise.transcendental; }

}  // namespace meganeura::passes
