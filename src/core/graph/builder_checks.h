// Checks shared by the graph builders: errors named by op, and the one graph all inputs share.
#pragma once
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "graph/op_table.h"
#include "meganeura/graph.h"

namespace meganeura::builder {

[[noreturn]] inline void fail(Op op, const std::string& msg) {
  throw std::invalid_argument("[" + std::string(op_name(op)) + "] " + msg);
}

inline Graph& graph_of(Op op, std::initializer_list<Tensor> ts) {
  Graph* g = nullptr;
  for (const Tensor& t : ts) {
    if (!t.graph) fail(op, "input tensor is not attached to a graph");
    if (g && g != t.graph) fail(op, "inputs come from different graphs");
    g = t.graph;
  }
  return *g;
}

}  // namespace meganeura::builder
