// softmax: softmax(causal_mask(x * s)) over the last axis -> softmax_scaled.
#include "meganeura/passes.h"
#include "passes/rewrite.h"

namespace meganeura {

Graph fuse_softmax(const Graph& g, PassStats* stats) {
  passes::Uses u(g);
  passes::Rewriter r(g);
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.op != Op::softmax || !passes::all_f32(g, n) ||
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

}  // namespace meganeura
