// What the rewrite passes share: use counts, the node-by-node graph copier, and the predicates
// several passes ask. Each pass copies the graph node by node (the graph is append-only and in
// topological order), replacing matched patterns by fused nodes; replaced nodes are left for
// remove_dead_nodes to drop.
#pragma once

#include <limits>
#include <vector>

#include "meganeura/graph.h"

namespace meganeura::passes {

constexpr NodeId kNone = std::numeric_limits<NodeId>::max();

// Uses of every node: input slots referencing it, and whether an output or assignment pins it.
struct Uses {
  std::vector<uint32_t> count;
  std::vector<std::vector<NodeId>> consumers;  // distinct consumer nodes
  std::vector<char> pinned;
  std::vector<NodeId> assigned_to;  // value -> the state it is assigned to, or kNone
  explicit Uses(const Graph& g);
  // Used exactly once, by an input slot, and by no output or assignment.
  bool single(NodeId id) const { return count[id] == 1 && !pinned[id]; }
};

// Copies nodes of `src` into a new graph, mapping ids.
class Rewriter {
 public:
  explicit Rewriter(const Graph& src) : src_(src), map_(src.size(), kNone) {}

  NodeId copy(NodeId id);
  // Adds a node standing for `id` of the source, with inputs given as source ids.
  NodeId replace(NodeId id, Op op, Attrs attrs, const std::vector<NodeId>& inputs);
  Graph& graph() { return dst_; }
  void bind(NodeId id, NodeId to) { map_[id] = to; }
  Graph finish();
  NodeId at(NodeId id) const;

 private:
  std::vector<NodeId> mapped(const std::vector<NodeId>& ids) const;
  const Graph& src_;
  Graph dst_;
  std::vector<NodeId> map_;
};

bool all_f32(const Graph& g, const Node& n);
bool last_axis_keepdims_mean(const Node& n);
// Elementwise ops a fused program can evaluate (broadcast_to is the identity there: the
// program broadcasts its inputs to the output shape anyway).
bool is_pointwise(const Graph& g, const Node& n);
bool transcendental(Op op);
// A reduction a fused program can feed: over contiguous axes, or over any axes (of a domain
// of rank <= push::kMaxRank) where the backend walks them (`strided`).
bool is_reduce_host(const Graph& g, const Node& n, bool strided);

}  // namespace meganeura::passes
