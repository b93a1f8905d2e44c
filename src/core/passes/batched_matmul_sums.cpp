// batched_matmul_sums: the sum over the batch of a batched A^T B (a shared weight's gradient)
// -> one GEMM over the flattened batch.
#include "meganeura/passes.h"
#include "passes/rewrite.h"

namespace meganeura {

Graph fold_batched_matmul_sums(const Graph& g, PassStats* stats) {
  passes::Uses u(g);
  passes::Rewriter r(g);
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    // sum over the batch axis of a batched A^T B (a shared weight's gradient) is one GEMM
    // over the flattened batch: sum_b A_b^T B_b = [A_0; A_1; ...]^T [B_0; B_1; ...]
    bool match = n.op == Op::sum && passes::all_f32(g, n) &&
                 std::get<ReduceAttrs>(n.attrs).axes == std::vector<int64_t>{0} &&
                 std::get<ReduceAttrs>(n.attrs).keepdims;
    NodeId mm = match ? n.inputs[0] : passes::kNone;
    if (match) {
      const Node& m = g.node(mm);
      const auto* ma = std::get_if<MatmulAttrs>(&m.attrs);
      match = m.op == Op::matmul && u.single(mm) && ma && ma->trans_a && !ma->trans_b && passes::all_f32(g, m) &&
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

}  // namespace meganeura
