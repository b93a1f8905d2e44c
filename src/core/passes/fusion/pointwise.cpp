// pointwise: elementwise chains -> fused_elementwise programs (and the driver of all fusion).
#include <algorithm>
#include <stdexcept>

#include "graph/internal.h"
#include "graph/op_table.h"
#include "passes/fusion/fuser.h"

namespace meganeura::passes {

Fuser::Fuser(const Graph& g, bool epilogues, bool multi, bool strided)
    : g_(g), u_(g), epilogues_(epilogues), multi_(multi), strided_(strided), inl_(g.size(), 0) {
  // heavy: the node's program (its own op and what is inlined into it) calls a transcendental
  // function. A heavy node is recomputed by no more than one consumer and never once per
  // broadcast element: that costs more than the memory round trip it saves.
  // reads: the tensors of the node's own size its program reads (through what is inlined
  // into it). A node with several consumers is recomputed by each only where that reads no
  // more than materialising it would: it read once, written once and read by each consumer.
  std::vector<char> heavy(g.size(), 0);
  std::vector<std::vector<NodeId>> reads(g.size());
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (!is_pointwise(g, n) || u_.pinned[id] || u_.consumers[id].empty()) continue;
    heavy[id] = transcendental(n.op);
    for (NodeId k : n.inputs) heavy[id] |= inl_[k] && heavy[k];
    for (NodeId k : n.inputs) {
      for (NodeId r : inl_[k] ? reads[k] : std::vector<NodeId>{k}) {
        if (g.node(r).type.numel() == n.type.numel() &&
            std::find(reads[id].begin(), reads[id].end(), r) == reads[id].end()) {
          reads[id].push_back(r);
        }
      }
    }
    const size_t users = u_.consumers[id].size(), big = reads[id].size();
    bool ok = users == 1 || users * big <= big + 1 + users;
    if (heavy[id]) {
      ok = u_.count[id] == 1;
      for (NodeId c : u_.consumers[id])
        ok &= g.node(c).type.numel() <= n.type.numel() || is_reduce_host(g, g.node(c), strided_);
    }
    for (NodeId c : u_.consumers[id]) ok &= is_pointwise(g, g.node(c)) || is_reduce_host(g, g.node(c), strided_);
    // a node with several consumers reading a matmul used nowhere else stays a host: it becomes
    // that matmul's epilogue (inlined into several consumers, all of them would read the product)
    for (NodeId k : n.inputs) {
      const Node& m = g.node(k);
      if (epilogues && u_.count[id] > 1 && m.op == Op::matmul && u_.single(k) && m.type.shape == n.type.shape)
        ok = false;
    }
    inl_[id] = ok;
  }
}

Graph Fuser::run(PassStats* stats) {
  Programs ps = build_programs();
  // Matmuls read by exactly one host's program become that host's product.
  ps.leaf_hosts = count_leaf_hosts(ps.progs);
  Rewriter r(g_);
  for (NodeId id = 0; id < g_.size(); ++id) {
    if (inl_[id]) {
      if (stats) stats->inlined++;
      continue;
    }
    if (ps.absorbed[id]) continue;  // bound to its fused_output when its absorber is emitted
    auto it = ps.progs.find(id);
    if (it == ps.progs.end()) {
      r.copy(id);
    } else if (auto ab = ps.absorbs.find(id); ab != ps.absorbs.end()) {
      emit_multi_output(r, id, it->second, ab->second, stats);
    } else {
      emit_host(r, id, it->second, ps.leaf_hosts, stats);
    }
  }
  return r.finish();
}

// Builds every host's program; a program over the limits materialises its largest inlined
// operand and the whole build starts again (each round materialises one more node). A
// merge into a multi-output program that reads too many inputs materialises an inlined node
// its parts share (a tied weight's summed, clipped gradient read by both moments) and starts
// again likewise.
Fuser::Programs Fuser::build_programs() {
  Programs ps;
  for (bool again = true; again;) {
    again = false;
    ps.progs.clear();
    for (NodeId id = 0; id < g_.size() && !again; ++id) {
      if (inl_[id] || !host(id)) continue;
      FusedProgram p = build(id);
      if (!p.fits()) {
        materialise_child(id);
        again = true;
      } else {
        ps.progs[id] = std::move(p);
      }
    }
    if (again) continue;
    ps.leaf_hosts = count_leaf_hosts(ps.progs);
    ps.absorbs.clear();
    ps.absorbed.assign(g_.size(), 0);
    if (!multi_) continue;
    const NodeId split = merge_outputs(ps.progs, ps.leaf_hosts, ps.absorbs, ps.absorbed);
    if (split != kNone) {
      inl_[split] = 0;
      again = true;
    }
  }
  return ps;
}

// A host with one output: a matmul epilogue, the node unchanged when nothing was inlined
// into it, or a fused elementwise program or reduction.
void Fuser::emit_host(Rewriter& r, NodeId id, FusedProgram& p, std::map<NodeId, int>& leaf_hosts, PassStats* stats) {
  const Node& n = g_.node(id);
  const NodeId mm = epilogues_ ? epilogue_matmul(id, p, leaf_hosts) : kNone;
  if (mm != kNone) return emit_epilogue(r, id, mm, p, stats);
  bool trivial = !reduce_host(id);  // nothing inlined: the node stays as it is
  for (NodeId k : n.inputs) trivial &= inl_[k] != 1;
  if (trivial) return (void)r.copy(id);
  FusedAttrs a;
  if (reduce_host(id)) {
    const auto& ra = std::get<ReduceAttrs>(n.attrs);
    a.reduce = n.op;
    a.domain = g_.node(n.inputs[0]).type.shape;
    a.axes = ra.axes;
    a.keepdims = ra.keepdims;
  } else {
    prefer_inplace_leaf(id, p);
  }
  a.code = p.code;
  r.replace(id, reduce_host(id) ? Op::fused_reduce : Op::fused_elementwise, a, p.leaves);
  if (stats) stats->fused++;
}

bool Fuser::host(NodeId id) const { return is_pointwise(g_, g_.node(id)) || reduce_host(id); }

FusedProgram Fuser::build(NodeId id) {
  FusedProgram p;
  const Node& n = g_.node(id);
  if (reduce_host(id))
    emit(n.inputs[0], p);
  else
    expand(n, p);
  return p;
}

void Fuser::push(FusedProgram& p, FusedInstr f) {
  if (f.kind == FusedInstr::input || f.kind == FusedInstr::constant)
    p.max_depth = std::max(p.max_depth, ++p.depth);
  else if (f.kind == FusedInstr::binary)
    --p.depth;
  p.code.push_back(f);
}

void Fuser::emit(NodeId id, FusedProgram& p) {
  if (p.code.size() > kFusedMaxCode) return;  // over the limit already: stop expanding
  const Node& n = g_.node(id);
  if (inl_[id] == 1) {
    expand(n, p);
    return;
  }
  if (n.op == Op::constant && n.type.numel() == 1) {
    push(p, FusedInstr{FusedInstr::constant, Op::constant, 0, n.const_data[0], 0});
    return;
  }
  auto it = std::find(p.leaves.begin(), p.leaves.end(), id);
  uint32_t k = uint32_t(it - p.leaves.begin());
  if (it == p.leaves.end()) p.leaves.push_back(id);
  push(p, FusedInstr{FusedInstr::input, Op::copy, k, 0, 0});
}

// The node's own operation over its (possibly inlined) inputs.
void Fuser::expand(const Node& n, FusedProgram& p) {
  if (n.op == Op::broadcast_to || n.op == Op::copy || n.op == Op::detach) {
    emit(n.inputs[0], p);
    return;
  }
  if (op_info(n.op).family == OpFamily::binary) {
    emit(n.inputs[0], p);
    emit(n.inputs[1], p);
    push(p, FusedInstr{FusedInstr::binary, n.op, 0, 0, 0});
    return;
  }
  emit(n.inputs[0], p);
  FusedInstr f{FusedInstr::unary, n.op, 0, 0, 0};
  if (n.op == Op::affine) {
    f.a = std::get<AffineAttrs>(n.attrs).scale;
    f.b = std::get<AffineAttrs>(n.attrs).shift;
  } else if (n.op == Op::clip_coef) {
    f.a = std::get<ClipAttrs>(n.attrs).max_norm;
  }
  push(p, f);
}

size_t Fuser::size(NodeId id, std::map<NodeId, size_t>& memo) {
  if (inl_[id] != 1) return 1;
  if (auto it = memo.find(id); it != memo.end()) return it->second;
  size_t s = 1;
  for (NodeId k : g_.node(id).inputs) s = std::min<size_t>(s + size(k, memo), 1u << 20);
  return memo[id] = s;
}

// Materialises one inlined node below `host`: the one with the largest program that fits the
// limits on its own (a long chain is cut into a few full programs, not one node at a time),
// else the one with the largest expansion. A reduce host's own input stays inlined.
void Fuser::materialise_child(NodeId host) {
  std::map<NodeId, size_t> memo;
  const Node& n = g_.node(host);
  std::vector<NodeId> stack = reduce_host(host) ? g_.node(n.inputs[0]).inputs : n.inputs;
  std::vector<char> seen(g_.size(), 0);
  NodeId fit = kNone, big = kNone;
  size_t fit_size = 0, big_size = 0;
  while (!stack.empty()) {
    NodeId k = stack.back();
    stack.pop_back();
    if (inl_[k] != 1 || seen[k]) continue;
    seen[k] = 1;
    size_t s = size(k, memo);
    if (s > big_size) big = k, big_size = s;
    if (s > fit_size && s <= 4 * kFusedMaxCode) {
      FusedProgram p;
      expand(g_.node(k), p);
      if (p.fits() && p.code.size() > fit_size) fit = k, fit_size = p.code.size();
    }
    for (NodeId c : g_.node(k).inputs) stack.push_back(c);
  }
  NodeId best = fit != kNone && fit_size > 1 ? fit : big;
  if (best == kNone) throw std::logic_error("[passes] a fused program exceeds its limits with nothing to split");
  inl_[best] = 0;
}

// Input 0 is what the planner may overwrite in place: the state this value is assigned to
// when the program reads it (an optimizer update), else the first input of the output's shape.
void Fuser::prefer_inplace_leaf(NodeId id, FusedProgram& p) const {
  const Shape& s = g_.node(id).type.shape;
  size_t pick = p.leaves.size();
  NodeId target = u_.assigned_to[id];
  for (size_t k = 0; k < p.leaves.size() && target != kNone; ++k) {
    if (p.leaves[k] == target) pick = k;
  }
  for (size_t k = 0; k < p.leaves.size() && pick == p.leaves.size(); ++k) {
    if (g_.node(p.leaves[k]).type.shape == s) pick = k;
  }
  if (pick < p.leaves.size()) move_leaf_first(p, pick);
}

}  // namespace meganeura::passes

namespace meganeura {

Graph fuse_pointwise(const Graph& g, const PassOptions& o, PassStats* stats) {
  return passes::Fuser(g, o.matmul_epilogue, o.multi_output, o.strided_reductions).run(stats);
}

}  // namespace meganeura
