// The op table, gathered from each op's declaration (op_def<op>(), defined in the op's file).
#include <stdexcept>

#include "graph/op_table.h"

namespace meganeura {
namespace {

const std::array<OpInfo, kOpCount>& table() {
  static const std::array<OpInfo, kOpCount> rows = {
#define MEGANEURA_X(name) ops::op_def<Op::name>(),
#include "meganeura/op_list.inc"
#undef MEGANEURA_X
  };
  return rows;
}

}  // namespace

const std::array<OpInfo, kOpCount>& op_table() { return table(); }

const OpInfo& op_info(Op op) {
  if (size_t(op) >= kOpCount) throw std::invalid_argument("[graph] invalid op id " + std::to_string(size_t(op)));
  return table()[size_t(op)];
}

std::string_view op_name(Op op) { return op_info(op).name; }

OpCost op_cost(const Graph& g, const Node& n) {
  const OpInfo& info = op_info(n.op);
  if (info.family == OpFamily::leaf) return {};
  double bytes = double(n.type.bytes());
  for (NodeId i : n.inputs) bytes += double(g.node(i).type.bytes());
  OpCost c{info.cost.per_output * double(n.type.numel()), bytes};
  if (info.cost.fn) {
    const OpCost extra = info.cost.fn(ops::CostArgs{g, n});
    c.flops += extra.flops;
    c.bytes += extra.bytes;
  }
  return c;
}

}  // namespace meganeura
