// quantise_weights: the inference graph of a model whose linear layers multiply by W^T, with
// those weights held in a block format. A parameter W [out, in] (in a multiple of 32, f32)
// that only ever enters as the transposed right operand of matmuls becomes a parameter of the
// same name and shape in the format, and each of those matmuls a matmul_q (y = x W^T, the
// blocks decoded as they are read). Anything else (a weight also read another way, a gradient
// of it, a row that is no whole number of blocks) is left as it was.
#include <stdexcept>
#include <string>
#include <variant>

#include "meganeura/passes.h"
#include "passes/rewrite.h"

namespace meganeura {

Graph quantise_weights(const Graph& g, DType format, const std::function<bool(const std::string&)>& keep_f32) {
  if (!dtype_is_block(format)) {
    throw std::invalid_argument("[quantise_weights] " + std::string(dtype_name(format)) +
                                " is not a block format (q8_0, q4_0)");
  }
  const passes::Uses uses(g);
  auto transposed_weight = [&](NodeId consumer, NodeId w) {
    const Node& c = g.node(consumer);
    if (c.op != Op::matmul || c.inputs.size() != 2 || c.inputs[1] != w || c.inputs[0] == w) return false;
    const auto& a = std::get<MatmulAttrs>(c.attrs);
    return a.trans_b && !a.trans_a;
  };
  std::vector<char> blocks(g.size(), 0);
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.op != Op::parameter || n.type.dtype != DType::f32 || n.type.shape.size() != 2) continue;
    if (n.type.shape[1] % dtype_block(format).elements != 0 || uses.pinned[id] || uses.consumers[id].empty()) continue;
    if (keep_f32 && keep_f32(n.name)) continue;
    bool all = true;
    for (NodeId c : uses.consumers[id]) all = all && transposed_weight(c, id);
    blocks[id] = all;
  }
  passes::Rewriter r(g);
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (blocks[id]) {
      r.bind(id, r.graph().parameter(n.name, n.type.shape, n.init, format).id);
    } else if (n.op == Op::matmul && n.inputs.size() == 2 && blocks[n.inputs[1]]) {
      Graph& d = r.graph();
      r.bind(id, matmul_q(d.tensor(r.at(n.inputs[0])), d.tensor(r.at(n.inputs[1]))).id);
    } else {
      r.copy(id);
    }
  }
  return r.finish();
}

}  // namespace meganeura
