// A hand-written fused program with three outputs, shared by the CPU and Vulkan tests.
#pragma once

#include <vector>

#include "graph/internal.h"
#include "meganeura/graph.h"

namespace meganeura::multi_output_case {

inline FusedInstr in(uint32_t k) { return {FusedInstr::input, Op::copy, k, 0, 0}; }
inline FusedInstr store(uint32_t k) { return {FusedInstr::store, Op::copy, k, 0, 0}; }
inline FusedInstr load(uint32_t k) { return {FusedInstr::load, Op::copy, k, 0, 0}; }
inline FusedInstr un(Op op, double a = 0, double b = 0) { return {FusedInstr::unary, op, 0, a, b}; }
inline FusedInstr bin(Op op) { return {FusedInstr::binary, op, 0, 0, 0}; }

// u = a * b + c (b broadcast over rows); w = exp(u) - a; y = 0.5 * u + w.
// Stored as outputs 1 (u), 2 (w) and 0 (y).
inline std::vector<FusedInstr> three_outputs() {
  return {in(0), in(1),        bin(Op::mul), in(2),   bin(Op::add),           store(1), load(1),      un(Op::exp),
          in(0), bin(Op::sub), store(2),     load(1), un(Op::affine, 0.5, 0), load(2),  bin(Op::add), store(0)};
}

struct Built {
  Graph g;
  NodeId multi = 0, u = 0, w = 0;
};

// The program's outputs y and w, and u unless `output_u` is false; with `consume`, z = exp(u)
// reads output 1.
inline Built three_output_graph(bool consume, bool output_u = true) {
  Built b;
  Graph& g = b.g;
  Tensor a = g.input("a", {3, 5}), bb = g.input("b", {5}), c = g.input("c", {3, 5});
  FusedAttrs f;
  f.code = three_outputs();
  const TensorType t{DType::f32, {3, 5}};
  Tensor y = graph_internal::add_node(g, Op::fused_elementwise, f, {a.id, bb.id, c.id}, t);
  Tensor u = graph_internal::add_node(g, Op::fused_output, AxisAttrs{1}, {y.id}, t);
  Tensor w = graph_internal::add_node(g, Op::fused_output, AxisAttrs{2}, {y.id}, t);
  g.output("y", y);
  if (output_u) g.output("u", u);
  g.output("w", w);
  if (consume) g.output("z", exp(u));
  b.multi = y.id;
  b.u = u.id;
  b.w = w.id;
  return b;
}

}  // namespace meganeura::multi_output_case
