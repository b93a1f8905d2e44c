// What the op files' builders share: errors named by op, the one graph of all inputs, and
// the plain elementwise builders.
#include <algorithm>
#include <stdexcept>

#include "graph/internal.h"
#include "graph/op_table.h"

namespace meganeura::ops {

void fail(Op op, const std::string& msg) { throw std::invalid_argument("[" + std::string(op_name(op)) + "] " + msg); }

Graph& graph_of(Op op, std::initializer_list<Tensor> ts) {
  Graph* g = nullptr;
  for (const Tensor& t : ts) {
    if (!t.graph) fail(op, "input tensor is not attached to a graph");
    Graph* tg = t.graph.get();
    if (g && g != tg) fail(op, "inputs come from different graphs");
    g = tg;
  }
  return *g;
}

void require_float(Op op, Tensor x) {
  if (!dtype_is_float(x.dtype())) fail(op, "expects a floating-point input, got " + std::string(dtype_name(x.dtype())));
}

int64_t norm_axis(Op op, int64_t axis, int64_t rank) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) fail(op, "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return a;
}

Shape broadcast_shapes(Op op, const std::vector<Shape>& shapes) {
  size_t r = 0;
  for (const Shape& s : shapes) r = std::max(r, s.size());
  Shape out(r, 1);
  for (const Shape& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[i + r - s.size()];
      if (s[i] != 1 && o != 1 && s[i] != o) {
        std::string all;
        for (const Shape& t : shapes) all += (all.empty() ? "" : " and ") + shape_str(t);
        fail(op, "shapes " + all + " do not broadcast");
      }
      if (s[i] != 1) o = s[i];
    }
  }
  return out;
}

Tensor unary_node(Op op, Tensor x, Attrs attrs) {
  Graph& g = graph_of(op, {x});
  require_float(op, x);
  return graph_internal::add_node(g, op, std::move(attrs), {x.id}, x.type());
}

Tensor binary_node(Op op, Tensor a, Tensor b) {
  Graph& g = graph_of(op, {a, b});
  if (a.dtype() != b.dtype()) {
    fail(op, "dtypes differ: " + std::string(dtype_name(a.dtype())) + " and " + std::string(dtype_name(b.dtype())));
  }
  require_float(op, a);
  return graph_internal::add_node(g, op, NoAttrs{}, {a.id, b.id},
                                  TensorType{a.dtype(), broadcast_shapes(op, {a.shape(), b.shape()})});
}

}  // namespace meganeura::ops
