// decompose: the fused token cross-entropy (and its backward) and `where` as compositions of
// primitive ops, for a backend without their kernels.
#include "meganeura/passes.h"
#include "passes/rewrite.h"

namespace meganeura {

Graph decompose_to_primitives(const Graph& g) {
  passes::Rewriter r(g);
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

}  // namespace meganeura
