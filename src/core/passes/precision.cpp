// The precision contracts: rounding nodes in front of the forward products' operands.
#include <algorithm>
#include <map>
#include <optional>
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

std::string_view backward_name(Backward b) { return b == Backward::f32 ? "f32" : "reduced"; }

Backward parse_backward(std::string_view name) {
  for (Backward b : {Backward::f32, Backward::reduced}) {
    if (name == backward_name(b)) return b;
  }
  throw std::invalid_argument("[precision] unknown backward precision '" + std::string(name) +
                              "' (expected f32 or reduced)");
}

void check_backward(Precision p, Backward b) {
  if (b == Backward::f32 || p == Precision::accelerated) return;
  if (p == Precision::strict) {
    throw std::invalid_argument(
        "[precision] backward 'reduced' rounds the gradients' operands like the forward's, so it needs the "
        "accelerated contract (the contract is strict)");
  }
  throw std::invalid_argument(
      "[precision] backward 'reduced' is not offered with accelerated-bf16: bf16 operands in backward put "
      "ResNet-50's gradient 10% off PyTorch f32 (gate 5%, docs/precision.md); use accelerated");
}

namespace {

// The products whose operands a contract rounds: the forward matmul, convolution and attention.
// Their gradients (matmul again, conv2d_backward_*, attention_fused_backward) are pinned.
bool reads_rounded_operands(Op op) { return op == Op::matmul || op == Op::conv2d || op == Op::attention_fused; }

// The gradients' products and the inputs of theirs that are operands; Backward::reduced rounds
// those. The attention backward's packed forward output (its output and log-sum-exp, input 3)
// stays f32: it is not a product's operand but the saved statistics the tiles are rebuilt from.
bool backward_product(Op op) {
  return op == Op::matmul || op == Op::conv2d_backward_input || op == Op::conv2d_backward_weight ||
         op == Op::attention_fused_backward;
}
bool rounded_backward_input(Op op, size_t k) { return op != Op::attention_fused_backward || k != 3; }

}  // namespace

Graph apply_precision(const Graph& g, Precision p, uint32_t* rounded, std::vector<std::string>* held_parameters,
                      Backward backward) {
  check_backward(p, backward);
  if (p == Precision::strict) return g;
  const Op round = p == Precision::accelerated ? Op::round_f16 : Op::round_bf16;
  passes::Rewriter rw(g);
  // (source node, read by a gradient's product) -> its rounding node in the new graph. The
  // gradients round their operands anew where they read them: the forward's 16-bit copies then
  // live through the forward alone, and each copy is stored in 16 bits where all of its own
  // readers take 16-bit operands (the backward convolutions and attention read f32).
  std::map<std::pair<NodeId, bool>, NodeId> rounding;
  uint32_t made = 0;
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    const bool rounds =
        n.pinned ? backward == Backward::reduced && backward_product(n.op) : reads_rounded_operands(n.op);
    if (!rounds) {
      rw.copy(id);
      continue;
    }
    std::vector<NodeId> inputs;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const NodeId k = n.inputs[i];
      const Node& src = g.node(k);
      if (n.pinned && !rounded_backward_input(n.op, i)) {
        inputs.push_back(rw.at(k));
        continue;
      }
      const bool held = held_parameters && src.op == Op::parameter && src.type.dtype == DType::f32;
      if (src.type.dtype != DType::f32 || src.op == round || held) {
        if (held && std::find(held_parameters->begin(), held_parameters->end(), src.name) == held_parameters->end())
          held_parameters->push_back(src.name);
        inputs.push_back(rw.at(k));
        continue;
      }
      auto it = rounding.find({k, n.pinned});
      if (it == rounding.end()) {
        const NodeId r = graph_internal::add_node(rw.graph(), round, NoAttrs{}, {rw.at(k)}, src.type).id;
        it = rounding.emplace(std::pair{k, n.pinned}, r).first;
        ++made;
      }
      inputs.push_back(it->second);
    }
    std::optional<graph_internal::PinnedScope> pinned;  // a gradient's product stays marked as one
    if (n.pinned) pinned.emplace(rw.graph());
    rw.bind(id, graph_internal::add_node(rw.graph(), n.op, n.attrs, inputs, n.type, n.name).id);
  }
  if (rounded) *rounded += made;
  return rw.finish();
}

}  // namespace meganeura
