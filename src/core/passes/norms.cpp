// norms: RMS, layer and group normalisation chains over the last axis -> norm.
#include <map>
#include <optional>

#include "meganeura/passes.h"
#include "passes/rewrite.h"

namespace meganeura {

namespace {
using passes::all_f32;
using passes::kNone;
using passes::last_axis_keepdims_mean;

struct NormMatch {
  NodeId x = kNone, gamma = kNone, beta = kNone;
  NormAttrs attrs;
};

// y = x * rsqrt(mean(x * x) + eps) (rms) or xc * rsqrt(mean(xc * xc) + eps) with
// xc = x - mean(x) (layer), every intermediate used only inside the chain; then * gamma and
// + beta over the last axis when they follow.
std::optional<NormMatch> match_norm(const Graph& g, const passes::Uses& u, NodeId y, NodeId* last) {
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
  passes::Uses u(g);
  std::map<NodeId, NormMatch> at_last;
  for (NodeId id = 0; id < g.size(); ++id) {
    NodeId last = kNone;
    if (auto m = match_norm(g, u, id, &last)) at_last[last] = *m;
  }
  passes::Rewriter r(g);
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

}  // namespace meganeura
