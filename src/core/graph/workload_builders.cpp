// Builders for the primitives the five workloads added: trigonometry, maximum/less/where,
// gather along an axis, the fused token cross-entropy, and arange.
#include <algorithm>
#include <stdexcept>

#include "graph/builder_checks.h"
#include "graph/op_table.h"
#include "meganeura/graph.h"

namespace meganeura {
namespace {

using builder::fail;
using builder::graph_of;

void require_float(Op op, Tensor x) {
  if (!dtype_is_float(x.dtype())) fail(op, "expects a floating-point input, got " + std::string(dtype_name(x.dtype())));
}

void require_ids(Op op, Tensor ids, const char* what) {
  if (ids.dtype() != DType::i32)
    fail(op, std::string(what) + " must be i32, got " + std::string(dtype_name(ids.dtype())));
}

Shape broadcast3(Op op, const std::vector<Shape>& shapes) {
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

Tensor elementwise2(Op op, Tensor a, Tensor b) {
  Graph& g = graph_of(op, {a, b});
  require_float(op, a);
  if (a.dtype() != b.dtype()) fail(op, "dtypes differ");
  return g.add_node(op, NoAttrs{}, {a.id, b.id}, TensorType{a.dtype(), broadcast3(op, {a.shape(), b.shape()})});
}

}  // namespace

Tensor sin(Tensor x) {
  require_float(Op::sin, x);
  return graph_of(Op::sin, {x}).add_node(Op::sin, NoAttrs{}, {x.id}, x.type());
}
Tensor cos(Tensor x) {
  require_float(Op::cos, x);
  return graph_of(Op::cos, {x}).add_node(Op::cos, NoAttrs{}, {x.id}, x.type());
}
Tensor maximum(Tensor a, Tensor b) { return elementwise2(Op::maximum, a, b); }
Tensor less(Tensor a, Tensor b) { return elementwise2(Op::less, a, b); }

Tensor where(Tensor cond, Tensor a, Tensor b) {
  constexpr Op op = Op::where;
  Graph& g = graph_of(op, {cond, a, b});
  require_float(op, a);
  if (cond.dtype() != a.dtype() || a.dtype() != b.dtype())
    fail(op, "condition and both branches must share a float dtype");
  Shape out = broadcast3(op, {cond.shape(), a.shape(), b.shape()});
  return g.add_node(op, NoAttrs{}, {cond.id, a.id, b.id}, TensorType{a.dtype(), out});
}

Tensor gather(Tensor x, int64_t axis, Tensor indices) {
  constexpr Op op = Op::gather;
  Graph& g = graph_of(op, {x, indices});
  require_ids(op, indices, "indices");
  if (indices.rank() != 1) fail(op, "indices must be one-dimensional, got " + shape_str(indices.shape()));
  int64_t a = axis < 0 ? axis + x.rank() : axis;
  if (a < 0 || a >= x.rank()) fail(op, "axis " + std::to_string(axis) + " out of range for " + shape_str(x.shape()));
  Shape out = x.shape();
  out[size_t(a)] = indices.dim(0);
  return g.add_node(op, GatherAttrs{a, x.dim(a)}, {x.id, indices.id}, TensorType{x.dtype(), out});
}

Tensor gather_backward(Tensor dy, Tensor indices, int64_t axis, int64_t size) {
  constexpr Op op = Op::gather_backward;
  Graph& g = graph_of(op, {dy, indices});
  require_ids(op, indices, "indices");
  if (axis < 0 || axis >= dy.rank() || indices.rank() != 1 || dy.dim(axis) != indices.dim(0) || size < 1) {
    fail(op, "gradient " + shape_str(dy.shape()) + " does not match indices " + shape_str(indices.shape()) +
                 " on axis " + std::to_string(axis));
  }
  Shape out = dy.shape();
  out[size_t(axis)] = size;
  return g.add_node(op, GatherAttrs{axis, size}, {dy.id, indices.id}, TensorType{dy.dtype(), out});
}

Tensor softmax_cross_entropy(Tensor logits, Tensor targets, int64_t ignore_index) {
  constexpr Op op = Op::softmax_cross_entropy;
  Graph& g = graph_of(op, {logits, targets});
  require_float(op, logits);
  require_ids(op, targets, "targets");
  if (logits.rank() != 2 || targets.rank() != 1 || targets.dim(0) != logits.dim(0)) {
    fail(op, "expects logits [N,C] and targets [N], got " + shape_str(logits.shape()) + " and " +
                 shape_str(targets.shape()));
  }
  return g.add_node(op, OneHotAttrs{logits.dim(1), ignore_index}, {logits.id, targets.id},
                    TensorType{logits.dtype(), {}});
}

Tensor softmax_cross_entropy_backward(Tensor logits, Tensor targets, Tensor g, int64_t ignore_index) {
  constexpr Op op = Op::softmax_cross_entropy_backward;
  Graph& G = graph_of(op, {logits, targets, g});
  if (g.rank() != 0 || logits.rank() != 2) fail(op, "expects logits [N,C] and a scalar upstream gradient");
  return G.add_node(op, OneHotAttrs{logits.dim(1), ignore_index}, {logits.id, targets.id, g.id}, logits.type());
}

Tensor attention_fused_packed(Tensor q, Tensor k, Tensor v, bool causal, double scale) {
  constexpr Op op = Op::attention_fused;
  Graph& g = graph_of(op, {q, k, v});
  require_float(op, q);
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4 || k.dim(0) != q.dim(0) || v.dim(0) != q.dim(0) ||
      v.dim(1) != k.dim(1) || v.dim(2) != k.dim(2) || k.dim(3) != q.dim(3) || q.dim(1) % k.dim(1) ||
      q.dtype() != k.dtype() || q.dtype() != v.dtype()) {
    fail(op, "incompatible q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " + shape_str(v.shape()));
  }
  AttentionAttrs a{causal, scale, q.shape(), k.shape(), v.shape()};
  const int64_t rows = q.dim(0) * q.dim(1) * q.dim(2);
  return g.add_node(op, a, {q.id, k.id, v.id}, TensorType{q.dtype(), {rows * v.dim(3) + rows}});
}

Tensor attention_fused_backward(Tensor q, Tensor k, Tensor v, Tensor packed, Tensor grad_packed,
                                const AttentionAttrs& a) {
  constexpr Op op = Op::attention_fused_backward;
  Graph& g = graph_of(op, {q, k, v, packed, grad_packed});
  if (q.shape() != a.q || k.shape() != a.k || v.shape() != a.v || packed.shape() != grad_packed.shape()) {
    fail(op, "operands do not match the forward attention");
  }
  const int64_t n = q.type().numel() + k.type().numel() + v.type().numel();
  return g.add_node(op, a, {q.id, k.id, v.id, packed.id, grad_packed.id}, TensorType{q.dtype(), {n}});
}

Tensor arange(Graph& g, int64_t n, double start, double step, DType dtype) {
  if (n < 0) throw std::invalid_argument("[arange] length must be non-negative, got " + std::to_string(n));
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = start + double(i) * step;
  return g.constant(std::move(values), {n}, dtype);
}

}  // namespace meganeura
