// The precision contracts: rounding nodes in front of the forward products' operands.
#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "graph/internal.h"
#include "meganeura/passes.h"
#include "passes/rewrite.h"

namespace meganeura {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::strict: return "strict";
    case Precision::accelerated: return "accelerated";
    case Precision::accelerated_bf16: return "accelerated-bf16";
  }
  return "?";
}

Precision parse_precision(std::string_view name) {
  for (Precision p : {Precision::strict, Precision::accelerated, Precision::accelerated_bf16}) {
    if (name == precision_name(p)) return p;
  }
  throw std::invalid_argument("[precision] unknown contract '" + std::string(name) +
                              "' (expected strict, accelerated or accelerated-bf16)");
}

namespace {

// The products whose operands a contract rounds: the forward matmul, convolution and attention.
// Their gradients (matmul again, conv2d_backward_*, attention_fused_backward) are pinned.
bool reads_rounded_operands(Op op) { return op == Op::matmul || op == Op::conv2d || op == Op::attention_fused; }

}  // namespace

Graph apply_precision(const Graph& g, Precision p, uint32_t* rounded, std::vector<std::string>* held_parameters) {
  if (p == Precision::strict) return g;
  const Op round = p == Precision::accelerated ? Op::round_f16 : Op::round_bf16;
  passes::Rewriter rw(g);
  std::map<NodeId, NodeId> rounding;  // source node -> its rounding node in the new graph
  uint32_t made = 0;
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.pinned || !reads_rounded_operands(n.op)) {
      rw.copy(id);
      continue;
    }
    std::vector<NodeId> inputs;
    for (NodeId k : n.inputs) {
      const Node& src = g.node(k);
      const bool held = held_parameters && src.op == Op::parameter && src.type.dtype == DType::f32;
      if (src.type.dtype != DType::f32 || src.op == round || held) {
        if (held && std::find(held_parameters->begin(), held_parameters->end(), src.name) == held_parameters->end())
          held_parameters->push_back(src.name);
        inputs.push_back(rw.at(k));
        continue;
      }
      auto it = rounding.find(k);
      if (it == rounding.end()) {
        const NodeId r = graph_internal::add_node(rw.graph(), round, NoAttrs{}, {rw.at(k)}, src.type).id;
        it = rounding.emplace(k, r).first;
        ++made;
      }
      inputs.push_back(it->second);
    }
    rw.bind(id, graph_internal::add_node(rw.graph(), n.op, n.attrs, inputs, n.type, n.name).id);
  }
  if (rounded) *rounded += made;
  return rw.finish();
}

}  // namespace meganeura
