// One row per op: its name, arity, how it is differentiated and what it costs. Autodiff,
// the backends and the test harness index their own tables by Op and check them against
// this one, so a new op cannot silently miss a gradient rule, a kernel or a check.
#pragma once

#include <array>
#include <string_view>

#include "meganeura/graph.h"

namespace meganeura {

enum class GradKind : uint8_t {
  leaf,           // input, parameter, state, constant
  vjp,            // has a vjp rule; checked against finite differences
  none,           // output is piecewise constant or integer-valued: zero gradient by definition
  backward_only,  // only appears inside gradients; checked through `checked_by`'s check
  fused,          // created by rewrite passes after autodiff; checked by the pass-equivalence tests
};

enum class OpFamily : uint8_t { leaf, unary, binary, reduce, linalg, conv, pool, movement, index, seq, optim, fused };

struct OpInfo {
  Op op;
  std::string_view name;
  int arity;  // -1: variadic
  OpFamily family;
  GradKind grad;
  Op checked_by;  // for backward_only ops: the forward op whose gradient check covers it
  // The input the output may overwrite in place (same size, read at the same index before the
  // write), or -1.
  int inplace_input;
};

const OpInfo& op_info(Op op);
std::string_view op_name(Op op);
const std::array<OpInfo, kOpCount>& op_table();

// Work of one node: floating-point operations and bytes read + written (dense, no caching).
struct OpCost {
  double flops = 0;
  double bytes = 0;
};
OpCost op_cost(const Graph& g, const Node& n);

}  // namespace meganeura

namespace meganeura {
std::string attrs_json(const Attrs& a);  // canonical JSON of an op's attributes
uint64_t fnv1a(std::string_view s);
}  // namespace meganeura
