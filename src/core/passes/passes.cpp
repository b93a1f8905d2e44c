// Rewrite passes. Each one copies the graph node by node (the graph is append-only and in
// topological order), replacing matched patterns by fused nodes; replaced nodes are left for
// remove_dead_nodes to drop.
#include "meganeura/passes.h"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>

#include "graph/internal.h"
#include "graph/op_table.h"

namespace meganeura {
namespace {

constexpr NodeId kNone = std::numeric_limits<NodeId>::max();

// Uses of every node: input slots referencing it, and whether an output or assignment pins it.
struct Uses {
  std::vector<uint32_t> count;
  std::vector<std::vector<NodeId>> consumers;  // distinct consumer nodes
  std::vector<char> pinned;
  std::vector<NodeId> assigned_to;  // value -> the state it is assigned to, or kNone
  explicit Uses(const Graph& g)
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
  // Used exactly once, by an input slot, and by no output or assignment.
  bool single(NodeId id) const { return count[id] == 1 && !pinned[id]; }
};

// Copies nodes of `src` into a new graph, mapping ids.
class Rewriter {
 public:
  explicit Rewriter(const Graph& src) : src_(src), map_(src.size(), kNone) {}

  NodeId copy(NodeId id) {
    const Node& n = src_.node(id);
    NodeId r = 0;
    switch (n.op) {
      case Op::input: r = dst_.input(n.name, n.type.shape, n.type.dtype).id; break;
      case Op::parameter: r = dst_.parameter(n.name, n.type.shape, n.init, n.type.dtype).id; break;
      case Op::state: r = dst_.state(n.name, n.type.shape, n.init, n.type.dtype).id; break;
      case Op::constant: r = dst_.constant(n.const_data, n.type.shape, n.type.dtype).id; break;
      default: r = graph_internal::add_node(dst_, n.op, n.attrs, mapped(n.inputs), n.type, n.name).id;
    }
    return map_[id] = r;
  }
  // Adds a node standing for `id` of the source, with inputs given as source ids.
  NodeId replace(NodeId id, Op op, Attrs attrs, const std::vector<NodeId>& inputs) {
    const Node& n = src_.node(id);
    return map_[id] = graph_internal::add_node(dst_, op, std::move(attrs), mapped(inputs), n.type, n.name).id;
  }
  Graph& graph() { return dst_; }
  void bind(NodeId id, NodeId to) { map_[id] = to; }
  Graph finish() {
    for (auto& [name, id] : src_.outputs()) dst_.output(name, dst_.tensor(at(id)));
    for (auto& [d, s] : src_.assignments()) dst_.assign(dst_.tensor(at(d)), dst_.tensor(at(s)));
    return std::move(dst_);
  }

  NodeId at(NodeId id) const {
    if (map_[id] == kNone)
      throw std::logic_error("[passes] node %" + std::to_string(id) + " used before it was copied");
    return map_[id];
  }

 private:
  std::vector<NodeId> mapped(const std::vector<NodeId>& ids) const {
    std::vector<NodeId> r;
    for (NodeId k : ids) r.push_back(at(k));
    return r;
  }
  const Graph& src_;
  Graph dst_;
  std::vector<NodeId> map_;
};

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

// Elementwise ops a fused program can evaluate (broadcast_to is the identity there: the
// program broadcasts its inputs to the output shape anyway).
bool is_pointwise(const Graph& g, const Node& n) {
  const ops::Elementwise& e = op_info(n.op).elementwise;
  const bool ok = (e.unary() && n.op != Op::cast) || e.binary() || n.op == Op::broadcast_to;
  return ok && all_f32(g, n);
}

bool transcendental(Op op) { return op_info(op).elementwise.transcendental; }

bool contiguous_axes(const std::vector<int64_t>& axes) {
  for (size_t k = 1; k < axes.size(); ++k) {
    if (axes[k] != axes[k - 1] + 1) return false;
  }
  return !axes.empty();
}

// A reduction a fused program can feed: over contiguous axes, or over any axes (of a domain
// of rank <= push::kMaxRank) where the backend walks them (`strided`).
bool is_reduce_host(const Graph& g, const Node& n, bool strided) {
  if ((n.op != Op::sum && n.op != Op::mean && n.op != Op::max) || !all_f32(g, n)) return false;
  const auto& axes = std::get<ReduceAttrs>(n.attrs).axes;
  if (contiguous_axes(axes)) return true;
  return strided && !axes.empty() && g.node(n.inputs[0]).type.shape.size() <= 8;
}

}  // namespace

Graph remove_dead_nodes(const Graph& g, PassStats* stats) {
  std::vector<char> live(g.size(), 0);
  for (auto& [name, id] : g.outputs()) live[id] = 1;
  for (auto& [dst, src] : g.assignments()) live[dst] = live[src] = 1;
  for (size_t i = g.size(); i-- > 0;) {
    if (live[i]) {
      for (NodeId k : g.node(NodeId(i)).inputs) live[k] = 1;
    }
  }
  Rewriter r(g);
  for (NodeId id = 0; id < g.size(); ++id) {
    if (live[id])
      r.copy(id);
    else if (stats)
      stats->removed++;
  }
  return r.finish();
}

Graph fuse_softmax(const Graph& g, PassStats* stats) {
  Uses u(g);
  Rewriter r(g);
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.op != Op::softmax || !all_f32(g, n) ||
        std::get<AxisAttrs>(n.attrs).axis != int64_t(n.type.shape.size()) - 1) {
      r.copy(id);
      continue;
    }
    SoftmaxAttrs a;
    NodeId x = n.inputs[0];
    if (g.node(x).op == Op::causal_mask && u.single(x) && n.type.shape.size() >= 2) {
      a.causal = true;
      a.fill = std::get<MaskAttrs>(g.node(x).attrs).fill;
      x = g.node(x).inputs[0];
    }
    if (g.node(x).op == Op::affine && u.single(x) && std::get<AffineAttrs>(g.node(x).attrs).shift == 0) {
      a.scale = std::get<AffineAttrs>(g.node(x).attrs).scale;
      x = g.node(x).inputs[0];
    }
    if (x == n.inputs[0]) {
      r.copy(id);
      continue;
    }
    r.replace(id, Op::softmax_scaled, a, {x});
    if (stats) stats->softmaxes++;
  }
  return r.finish();
}

namespace {
struct NormMatch {
  NodeId x = kNone, gamma = kNone, beta = kNone;
  NormAttrs attrs;
};

// y = x * rsqrt(mean(x * x) + eps) (rms) or xc * rsqrt(mean(xc * xc) + eps) with
// xc = x - mean(x) (layer), every intermediate used only inside the chain; then * gamma and
// + beta over the last axis when they follow.
std::optional<NormMatch> match_norm(const Graph& g, const Uses& u, NodeId y, NodeId* last) {
  const Node& yn = g.node(y);
  if (yn.op != Op::mul || !all_f32(g, yn) || yn.type.shape.empty()) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    NodeId rs = yn.inputs[size_t(side)], xv = yn.inputs[size_t(1 - side)];
    const Node& rn = g.node(rs);
    if (rn.op != Op::rsqrt || !u.single(rs)) continue;
    NodeId e = rn.inputs[0];
    const Node& en = g.node(e);
    if (en.op != Op::affine || !u.single(e) || std::get<AffineAttrs>(en.attrs).scale != 1) continue;
    NodeId m = en.inputs[0];
    if (!last_axis_keepdims_mean(g.node(m)) || !u.single(m)) continue;
    NodeId q = g.node(m).inputs[0];
    const Node& qn = g.node(q);
    if (qn.op != Op::mul || qn.inputs[0] != xv || qn.inputs[1] != xv || !u.single(q)) continue;
    if (g.node(xv).type.shape != yn.type.shape) continue;
    NormMatch mt;
    mt.attrs.eps = std::get<AffineAttrs>(en.attrs).shift;
    mt.x = xv;
    // layer norm: xv = x - mean(x), used by q (twice) and y only
    const Node& xn = g.node(xv);
    if (xn.op == Op::sub && u.count[xv] == 3 && !u.pinned[xv] && last_axis_keepdims_mean(g.node(xn.inputs[1])) &&
        g.node(xn.inputs[1]).inputs[0] == xn.inputs[0] && u.single(xn.inputs[1])) {
      mt.attrs.center = true;
      mt.x = xn.inputs[0];
    }
    *last = y;
    const int64_t d = yn.type.shape.back();
    auto affine_operand = [&](NodeId cur, Op op) -> NodeId {
      if (!u.single(cur) || u.consumers[cur].size() != 1) return kNone;
      const Node& c = g.node(u.consumers[cur][0]);
      if (c.op != op || !all_f32(g, c) || c.type.shape != yn.type.shape) return kNone;
      NodeId other = c.inputs[0] == cur ? c.inputs[1] : c.inputs[0];
      if (op == Op::add && c.inputs[0] != cur) return kNone;
      return g.node(other).type.shape == Shape{d} ? other : kNone;
    };
    if (NodeId gm = affine_operand(y, Op::mul); gm != kNone) {
      mt.gamma = gm;
      *last = u.consumers[y][0];
      if (NodeId bt = affine_operand(*last, Op::add); bt != kNone) {
        mt.beta = bt;
        *last = u.consumers[*last][0];
      }
    }
    return mt;
  }
  return std::nullopt;
}
}  // namespace

Graph fuse_norms(const Graph& g, PassStats* stats) {
  Uses u(g);
  std::map<NodeId, NormMatch> at_last;
  for (NodeId id = 0; id < g.size(); ++id) {
    NodeId last = kNone;
    if (auto m = match_norm(g, u, id, &last)) at_last[last] = *m;
  }
  Rewriter r(g);
  for (NodeId id = 0; id < g.size(); ++id) {
    auto it = at_last.find(id);
    if (it == at_last.end()) {
      r.copy(id);
      continue;
    }
    const NormMatch& m = it->second;
    std::vector<NodeId> ins{m.x};
    if (m.gamma != kNone) ins.push_back(m.gamma);
    if (m.beta != kNone) ins.push_back(m.beta);
    r.replace(id, Op::norm, m.attrs, ins);
    if (stats) stats->norms++;
  }
  return r.finish();
}

Graph fold_batched_matmul_sums(const Graph& g, PassStats* stats) {
  Uses u(g);
  Rewriter r(g);
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    // sum over the batch axis of a batched A^T B (a shared weight's gradient) is one GEMM
    // over the flattened batch: sum_b A_b^T B_b = [A_0; A_1; ...]^T [B_0; B_1; ...]
    bool match = n.op == Op::sum && all_f32(g, n) && std::get<ReduceAttrs>(n.attrs).axes == std::vector<int64_t>{0} &&
                 std::get<ReduceAttrs>(n.attrs).keepdims;
    NodeId mm = match ? n.inputs[0] : kNone;
    if (match) {
      const Node& m = g.node(mm);
      const auto* ma = std::get_if<MatmulAttrs>(&m.attrs);
      match = m.op == Op::matmul && u.single(mm) && ma && ma->trans_a && !ma->trans_b && all_f32(g, m) &&
              m.type.shape.size() == 3 && g.node(m.inputs[0]).type.shape.size() == 3 &&
              g.node(m.inputs[1]).type.shape.size() == 3;
    }
    if (!match) {
      r.copy(id);
      continue;
    }
    const Node& m = g.node(mm);
    const Shape& as = g.node(m.inputs[0]).type.shape;
    const Shape& bs = g.node(m.inputs[1]).type.shape;
    Graph& d = r.graph();
    Tensor a2 = reshape(d.tensor(r.at(m.inputs[0])), {as[0] * as[1], as[2]});
    Tensor b2 = reshape(d.tensor(r.at(m.inputs[1])), {bs[0] * bs[1], bs[2]});
    Tensor prod = matmul(a2, b2, true, false);
    r.bind(id, reshape(prod, n.type.shape).id);
    if (stats) stats->folded++;
  }
  return r.finish();
}

// ---- pointwise fusion -----
namespace {

struct FusedProgram {
  std::vector<FusedInstr> code;
  std::vector<NodeId> leaves;
  size_t depth = 0, max_depth = 0;
  bool fits() const {
    return code.size() <= kFusedMaxCode && leaves.size() <= kFusedMaxInputs && max_depth <= kFusedMaxStack;
  }
};

class Fuser {
 public:
  Fuser(const Graph& g, bool epilogues, bool multi, bool strided)
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

  Graph run(PassStats* stats) {
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

 private:
  // Every host's program, and the multi-output merges among them.
  struct Programs {
    std::map<NodeId, FusedProgram> progs;
    std::map<NodeId, int> leaf_hosts;               // per node: the programs that read it
    std::map<NodeId, std::vector<NodeId>> absorbs;  // host -> the hosts it writes as outputs 1, 2, ...
    std::vector<char> absorbed;
  };

  static std::map<NodeId, int> count_leaf_hosts(const std::map<NodeId, FusedProgram>& progs) {
    std::map<NodeId, int> n;
    for (auto& [id, p] : progs)
      for (NodeId l : p.leaves) n[l]++;
    return n;
  }

  // Builds every host's program; a program over the limits materialises its largest inlined
  // operand and the whole build starts again (each round materialises one more node). A
  // merge into a multi-output program that reads too many inputs materialises an inlined node
  // its parts share (a tied weight's summed, clipped gradient read by both moments) and starts
  // again likewise.
  Programs build_programs() {
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

  void emit_multi_output(Rewriter& r, NodeId id, const FusedProgram& p, const std::vector<NodeId>& parts,
                         PassStats* stats) {
    FusedAttrs a;
    a.code = p.code;
    const NodeId multi = r.replace(id, Op::fused_elementwise, a, p.leaves);
    for (size_t k = 0; k < parts.size(); ++k) {
      const Node& h = g_.node(parts[k]);
      r.bind(
          parts[k],
          graph_internal::add_node(r.graph(), Op::fused_output, AxisAttrs{int64_t(k + 1)}, {multi}, h.type, h.name).id);
    }
    if (stats) stats->fused++, stats->multi_outputs += uint32_t(parts.size());
  }

  // A host with one output: a matmul epilogue, the node unchanged when nothing was inlined
  // into it, or a fused elementwise program or reduction.
  void emit_host(Rewriter& r, NodeId id, FusedProgram& p, std::map<NodeId, int>& leaf_hosts, PassStats* stats) {
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

  // The product becomes program input 0; node inputs are (a, b, other leaves...).
  void emit_epilogue(Rewriter& r, NodeId id, NodeId mm, FusedProgram& p, PassStats* stats) {
    auto pos = std::find(p.leaves.begin(), p.leaves.end(), mm) - p.leaves.begin();
    move_leaf_first(p, size_t(pos));
    FusedAttrs a;
    a.code = p.code;
    a.matmul = std::get<MatmulAttrs>(g_.node(mm).attrs);
    std::vector<NodeId> ins = g_.node(mm).inputs;
    ins.insert(ins.end(), p.leaves.begin() + 1, p.leaves.end());
    r.replace(id, Op::matmul_epilogue, a, ins);
    inl_[mm] = 2;  // copied already (it precedes id) but dead now; remove_dead_nodes drops it
    if (stats) stats->epilogues++;
  }

  bool reduce_host(NodeId id) const {
    const Node& n = g_.node(id);
    return is_reduce_host(g_, n, strided_) && inl_[n.inputs[0]] == 1;
  }
  bool host(NodeId id) const { return is_pointwise(g_, g_.node(id)) || reduce_host(id); }

  FusedProgram build(NodeId id) {
    FusedProgram p;
    const Node& n = g_.node(id);
    if (reduce_host(id))
      emit(n.inputs[0], p);
    else
      expand(n, p);
    return p;
  }

  void push(FusedProgram& p, FusedInstr f) {
    if (f.kind == FusedInstr::input || f.kind == FusedInstr::constant)
      p.max_depth = std::max(p.max_depth, ++p.depth);
    else if (f.kind == FusedInstr::binary)
      --p.depth;
    p.code.push_back(f);
  }

  void emit(NodeId id, FusedProgram& p) {
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
  void expand(const Node& n, FusedProgram& p) {
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

  size_t size(NodeId id, std::map<NodeId, size_t>& memo) {
    if (inl_[id] != 1) return 1;
    if (auto it = memo.find(id); it != memo.end()) return it->second;
    size_t s = 1;
    for (NodeId k : g_.node(id).inputs) s = std::min<size_t>(s + size(k, memo), 1u << 20);
    return memo[id] = s;
  }

  // Materialises one inlined node below `host`: the one with the largest program that fits the
  // limits on its own (a long chain is cut into a few full programs, not one node at a time),
  // else the one with the largest expansion. A reduce host's own input stays inlined.
  void materialise_child(NodeId host) {
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

  // A host whose value is assigned to a state absorbs the hosts its program reads that are
  // assigned to states of the same shape and read by nothing else (Adam's new moments read by
  // the new parameter): one program computes them all and stores each as an output. A merge
  // that would break the limits of one program is not made.
  // Returns an inlined node to materialise first when that would let a merge fit, else kNone.
  NodeId merge_outputs(std::map<NodeId, FusedProgram>& progs, std::map<NodeId, int>& leaf_hosts,
                       std::map<NodeId, std::vector<NodeId>>& absorbs, std::vector<char>& absorbed) {
    std::vector<char> named(g_.size(), 0);
    for (auto& [name, id] : g_.outputs()) named[id] = 1;
    auto mergeable = [&](NodeId h, NodeId host) {
      if (!progs.count(h) || reduce_host(h) || absorbed[h] || absorbs.count(h) || named[h] ||
          u_.assigned_to[h] == kNone || leaf_hosts[h] != 1 || g_.node(h).type != g_.node(host).type) {
        return false;
      }
      for (NodeId c : u_.consumers[h]) {
        if (c != host && inl_[c] != 1) return false;
      }
      return true;
    };
    for (auto& [id, p] : progs) {
      if (reduce_host(id) || u_.assigned_to[id] == kNone || absorbed[id]) continue;
      std::vector<NodeId> cands;
      for (NodeId h : p.leaves) {
        if (cands.size() + 1 < kFusedMaxOutputs && mergeable(h, id)) cands.push_back(h);
      }
      if (cands.empty()) continue;
      // all of them, else as many as fit one by one
      std::vector<NodeId> take;
      FusedProgram merged = combine(progs, cands, id);
      if (merged.fits()) {
        take = cands;
      } else {
        if (merged.leaves.size() > kFusedMaxInputs) {
          std::vector<NodeId> programs = cands;
          programs.push_back(id);
          if (NodeId k = shared_inlined(programs); k != kNone) return k;
        }
        for (NodeId h : cands) {
          std::vector<NodeId> trial = take;
          trial.push_back(h);
          FusedProgram m = combine(progs, trial, id);
          if (!m.fits()) continue;
          take = std::move(trial);
          merged = std::move(m);
        }
      }
      if (take.empty()) continue;
      for (NodeId h : take) {
        absorbed[h] = 1;
        progs.erase(h);
      }
      absorbs[id] = take;
      p = std::move(merged);
    }
    return kNone;
  }

  // The inlined node read by two or more of `programs`' hosts with the largest expansion, if it
  // reads two or more leaves itself (materialising it saves inputs of their merged program).
  NodeId shared_inlined(const std::vector<NodeId>& programs) {
    std::map<NodeId, int> reached;
    for (NodeId root : programs) {
      std::vector<NodeId> stack = g_.node(root).inputs;
      std::vector<NodeId> mine;
      while (!stack.empty()) {
        NodeId k = stack.back();
        stack.pop_back();
        if (inl_[k] != 1 || std::find(mine.begin(), mine.end(), k) != mine.end()) continue;
        mine.push_back(k);
        for (NodeId c : g_.node(k).inputs) stack.push_back(c);
      }
      for (NodeId k : mine) reached[k]++;
    }
    std::map<NodeId, size_t> memo;
    NodeId best = kNone;
    size_t best_size = 0;
    for (auto [k, n] : reached) {
      if (n < 2) continue;
      FusedProgram p;
      expand(g_.node(k), p);
      const size_t s = size(k, memo);
      if (p.leaves.size() >= 2 && p.fits() && s > best_size) best = k, best_size = s;
    }
    return best;
  }

  // The program storing the values of `parts` as outputs 1, 2, ... and then `host`'s value
  // as output 0, where the host's program loads the parts instead of reading them.
  FusedProgram combine(const std::map<NodeId, FusedProgram>& progs, const std::vector<NodeId>& parts,
                       NodeId host) const {
    FusedProgram m;
    auto leaf_index = [&](NodeId l) {
      auto it = std::find(m.leaves.begin(), m.leaves.end(), l);
      if (it != m.leaves.end()) return uint32_t(it - m.leaves.begin());
      m.leaves.push_back(l);
      return uint32_t(m.leaves.size() - 1);
    };
    auto append = [&](const FusedProgram& p, uint32_t out) {
      for (FusedInstr f : p.code) {
        if (f.kind == FusedInstr::input) {
          NodeId l = p.leaves[f.index];
          auto part = std::find(parts.begin(), parts.end(), l);
          if (part != parts.end()) {
            f.kind = FusedInstr::load;
            f.index = uint32_t(part - parts.begin()) + 1;
          } else {
            f.index = leaf_index(l);
          }
        }
        m.code.push_back(f);
      }
      m.code.push_back(FusedInstr{FusedInstr::store, Op::copy, out, 0, 0});
      m.max_depth = std::max(m.max_depth, p.max_depth);
    };
    for (size_t k = 0; k < parts.size(); ++k) append(progs.at(parts[k]), uint32_t(k + 1));
    append(progs.at(host), 0);
    return m;
  }

  NodeId epilogue_matmul(NodeId id, const FusedProgram& p, std::map<NodeId, int>& leaf_hosts) const {
    if (reduce_host(id)) return kNone;
    for (NodeId l : p.leaves) {
      const Node& m = g_.node(l);
      if (m.op == Op::matmul && all_f32(g_, m) && u_.single(l) && leaf_hosts[l] == 1 &&
          m.type.shape == g_.node(id).type.shape) {
        return l;
      }
    }
    return kNone;
  }

  static void move_leaf_first(FusedProgram& p, size_t pos) {
    if (pos == 0) return;
    std::rotate(p.leaves.begin(), p.leaves.begin() + int64_t(pos), p.leaves.begin() + int64_t(pos) + 1);
    for (FusedInstr& f : p.code) {
      if (f.kind != FusedInstr::input) continue;
      if (f.index == pos)
        f.index = 0;
      else if (f.index < pos)
        f.index++;
    }
  }

  // Input 0 is what the planner may overwrite in place: the state this value is assigned to
  // when the program reads it (an optimizer update), else the first input of the output's shape.
  void prefer_inplace_leaf(NodeId id, FusedProgram& p) const {
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

  const Graph& g_;
  Uses u_;
  bool epilogues_, multi_, strided_;
  std::vector<char> inl_;  // 1: inlined into its consumers' programs; 2: absorbed by an epilogue
};

}  // namespace

Graph fuse_pointwise(const Graph& g, bool matmul_epilogues, PassStats* stats, bool multi_output,
                     bool strided_reductions) {
  return Fuser(g, matmul_epilogues, multi_output, strided_reductions).run(stats);
}

Graph decompose_to_primitives(const Graph& g) {
  Rewriter r(g);
  Graph& d = r.graph();
  auto in = [&](const Node& n, size_t k) { return d.tensor(r.at(n.inputs[k])); };
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.op == Op::softmax_cross_entropy || n.op == Op::softmax_cross_entropy_backward) {
      Tensor x = in(n, 0);
      Tensor oh = one_hot(in(n, 1), x.dim(1), std::get<OneHotAttrs>(n.attrs).ignore_index);
      Tensor count = sum(oh);  // rows not ignored
      Tensor y;
      if (n.op == Op::softmax_cross_entropy) {
        y = neg(sum(oh * log_softmax(x, -1))) / count;
      } else {
        // softmax - target on rows that count, zero on ignored rows, times g / count
        y = (softmax(x, -1) * sum(oh, {1}, true) - oh) * (in(n, 2) / count);
      }
      r.bind(id, y.id);
    } else if (n.op == Op::where) {
      Tensor c = in(n, 0);
      r.bind(id, (in(n, 1) * c + in(n, 2) * affine(c, -1, 1)).id);
    } else {
      r.copy(id);
    }
  }
  return r.finish();
}

Graph optimize(const Graph& g, const PassOptions& o, PassStats* stats) {
  Graph cur = remove_dead_nodes(o.decompose ? decompose_to_primitives(g) : g, nullptr);
  if (o.softmax) cur = remove_dead_nodes(fuse_softmax(cur, stats), nullptr);
  if (o.norms) cur = remove_dead_nodes(fuse_norms(cur, stats), nullptr);
  if (o.batched_matmul_sums) cur = remove_dead_nodes(fold_batched_matmul_sums(cur, stats), nullptr);
  if (o.pointwise) cur = fuse_pointwise(cur, o.matmul_epilogue, stats, o.multi_output, o.strided_reductions);
  if (o.dead_nodes) return remove_dead_nodes(cur, stats);
  return cur;
}

}  // namespace meganeura
