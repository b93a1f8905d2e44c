#include <algorithm>
#include <set>

#include "graph/op_table.h"
#include "plan/plan_internal.h"

namespace meganeura::planning {

std::vector<NodeId> dispatch_order(const Graph& g, const std::vector<char>& live, bool group) {
  const size_t n = g.size();
  std::vector<NodeId> order;
  auto is_leaf = [&](NodeId id) { return op_info(g.node(id).op).family == OpFamily::leaf; };
  if (!group) {
    for (NodeId id = 0; id < n; ++id) {
      if (live[id] && !is_leaf(id)) order.push_back(id);
    }
    return order;
  }
  // Memory root through reshape chains: reading a view reads its root.
  std::vector<NodeId> root(n);
  for (NodeId id = 0; id < n; ++id) {
    const Node& nd = g.node(id);
    root[id] = nd.op == Op::reshape ? root[nd.inputs[0]] : id;
  }
  std::vector<std::vector<NodeId>> deps(n), users(n);
  for (NodeId id = 0; id < n; ++id) {
    if (!live[id] || is_leaf(id)) continue;
    for (NodeId k : g.node(id).inputs) {
      if (!is_leaf(k)) deps[id].push_back(k);
    }
  }
  // A state's new value comes after the earlier readers of its old value, so that it can be
  // written in place (readers with a larger id may depend on the new value: left alone).
  for (auto& [dst, value] : g.assignments()) {
    if (is_leaf(value)) continue;
    // a secondary output is written by the dispatch of the node it selects from
    const NodeId src = g.node(value).op == Op::fused_output ? g.node(value).inputs[0] : value;
    for (NodeId r = 0; r < src; ++r) {
      if (!live[r] || is_leaf(r) || r == src) continue;
      for (NodeId k : g.node(r).inputs) {
        if (root[k] == dst) {
          deps[src].push_back(r);
          break;
        }
      }
    }
  }
  std::vector<int> missing(n, 0);
  std::set<NodeId> ready;
  for (NodeId id = 0; id < n; ++id) {
    if (!live[id] || is_leaf(id)) continue;
    std::sort(deps[id].begin(), deps[id].end());
    deps[id].erase(std::unique(deps[id].begin(), deps[id].end()), deps[id].end());
    missing[id] = int(deps[id].size());
    for (NodeId k : deps[id]) users[k].push_back(id);
    if (missing[id] == 0) ready.insert(id);
  }
  // group_of: the barrier group a node's result is available after; views join their source.
  std::vector<int64_t> group_of(n, -1);
  int64_t current = 0;
  // Look ahead at most this far past the oldest ready node: bounds how far a dispatch moves
  // from node order, and so how much longer temporaries live.
  constexpr NodeId kWindow = 48;
  auto emit = [&](NodeId id, int64_t grp) {
    order.push_back(id);
    group_of[id] = grp;
    ready.erase(id);
    for (NodeId u : users[id]) {
      if (--missing[u] == 0) ready.insert(u);
    }
  };
  auto dep_group = [&](NodeId id) {
    int64_t gmax = -1;
    for (NodeId k : deps[id]) gmax = std::max(gmax, group_of[k]);
    return gmax;
  };
  while (!ready.empty()) {
    const NodeId oldest = *ready.begin();
    NodeId pick = oldest;
    bool found = false;
    for (NodeId id : ready) {
      if (id > oldest + kWindow) break;
      if (g.node(id).op == Op::reshape || dep_group(id) < current) {
        pick = id;
        found = true;
        break;
      }
    }
    if (!found) ++current;  // a barrier: everything ready is now free
    const bool view = g.node(pick).op == Op::reshape;
    emit(pick, view ? std::max<int64_t>(dep_group(pick), 0) : current);
  }
  return order;
}

}  // namespace meganeura::planning
