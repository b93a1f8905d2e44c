// The op table: every op's checked row (ops/op_def.h), gathered from the ops' own declarations.
// Autodiff, the schedule, the backends and the tests read an op's parts from here, never from
// a list of their own.
#pragma once

#include <array>
#include <string_view>

#include "meganeura/graph.h"
#include "ops/op_def.h"

namespace meganeura {

const OpInfo& op_info(Op op);
std::string_view op_name(Op op);
const std::array<OpInfo, kOpCount>& op_table();

// The work of one node: its FLOPs and the bytes it reads and writes.
OpCost op_cost(const Graph& g, const Node& n);

std::string attrs_json(const Attrs& a);  // canonical JSON of an op's attributes
// The inverse of attrs_json: the attribute struct whose keys the object has (plan/program_json.cpp).
// Throws, naming the key, for a malformed object or one that matches no struct.
Attrs parse_attrs(std::string_view text);
uint64_t fnv1a(std::string_view s);

}  // namespace meganeura
