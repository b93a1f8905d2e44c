// Builders: one function per primitive, each checking its inputs before appending a node.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "graph/builder_checks.h"
#include "graph/op_table.h"
#include "meganeura/graph.h"

namespace meganeura {
namespace {

using builder::fail;
using builder::graph_of;

int64_t norm_axis(Op op, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    fail(op, "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  }
  return a;
}

void require_float(Op op, Tensor x) {
  if (!dtype_is_float(x.dtype())) {
    fail(op, "expects a floating-point input, got " + std::string(dtype_name(x.dtype())));
  }
}

Tensor unary(Op op, Tensor x, Attrs attrs = NoAttrs{}) {
  Graph& g = graph_of(op, {x});
  require_float(op, x);
  return g.add_node(op, std::move(attrs), {x.id}, x.type());
}

Shape broadcast_shapes(Op op, const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      fail(op, "shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor binary(Op op, Tensor a, Tensor b) {
  Graph& g = graph_of(op, {a, b});
  if (a.dtype() != b.dtype()) {
    fail(op, "dtypes differ: " + std::string(dtype_name(a.dtype())) + " and " + std::string(dtype_name(b.dtype())));
  }
  require_float(op, a);
  return g.add_node(op, NoAttrs{}, {a.id, b.id}, TensorType{a.dtype(), broadcast_shapes(op, a.shape(), b.shape())});
}

Tensor reduce(Op op, Tensor x, std::vector<int64_t> axes, bool keepdims) {
  Graph& g = graph_of(op, {x});
  require_float(op, x);
  if (axes.empty()) {
    axes.resize(size_t(x.rank()));
    std::iota(axes.begin(), axes.end(), 0);
  }
  for (auto& a : axes) a = norm_axis(op, a, x.rank());
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) fail(op, "repeated axis");
  Shape out;
  for (int64_t i = 0; i < x.rank(); ++i) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), i);
    if (!reduced)
      out.push_back(x.shape()[size_t(i)]);
    else if (keepdims)
      out.push_back(1);
  }
  return g.add_node(op, ReduceAttrs{axes, keepdims}, {x.id}, TensorType{x.dtype(), out});
}

int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

}  // namespace

Tensor copy(Tensor x) { return graph_of(Op::copy, {x}).add_node(Op::copy, NoAttrs{}, {x.id}, x.type()); }
Tensor detach(Tensor x) { return graph_of(Op::detach, {x}).add_node(Op::detach, NoAttrs{}, {x.id}, x.type()); }
Tensor neg(Tensor x) { return unary(Op::neg, x); }
Tensor exp(Tensor x) { return unary(Op::exp, x); }
Tensor log(Tensor x) { return unary(Op::log, x); }
Tensor sqrt(Tensor x) { return unary(Op::sqrt, x); }
Tensor rsqrt(Tensor x) { return unary(Op::rsqrt, x); }
Tensor abs(Tensor x) { return unary(Op::abs, x); }
Tensor tanh(Tensor x) { return unary(Op::tanh, x); }
Tensor sigmoid(Tensor x) { return unary(Op::sigmoid, x); }
Tensor relu(Tensor x) { return unary(Op::relu, x); }
Tensor gelu(Tensor x, bool tanh_approximation) { return unary(tanh_approximation ? Op::gelu_tanh : Op::gelu_erf, x); }
Tensor gelu_grad(Tensor x, bool tanh_approximation) {
  return unary(tanh_approximation ? Op::gelu_tanh_grad : Op::gelu_erf_grad, x);
}
Tensor silu(Tensor x) { return unary(Op::silu, x); }
Tensor affine(Tensor x, double scale, double shift) { return unary(Op::affine, x, AffineAttrs{scale, shift}); }
Tensor sign(Tensor x) { return unary(Op::sign, x); }
Tensor positive_mask(Tensor x) { return unary(Op::positive_mask, x); }
Tensor operator*(Tensor a, double s) { return affine(a, s, 0); }
Tensor operator+(Tensor a, double s) { return affine(a, 1, s); }

Tensor cast(Tensor x, DType to) {
  Graph& g = graph_of(Op::cast, {x});
  if (to == DType::f64) fail(Op::cast, "f64 is reserved for the reference backend's oracle mode");
  return g.add_node(Op::cast, CastAttrs{to}, {x.id}, TensorType{to, x.shape()});
}

Tensor clip_coef(Tensor norm, double max_norm) {
  if (norm.rank() != 0) fail(Op::clip_coef, "expects a scalar norm, got " + shape_str(norm.shape()));
  if (!(max_norm > 0)) fail(Op::clip_coef, "max_norm must be positive");
  return unary(Op::clip_coef, norm, ClipAttrs{max_norm});
}

Tensor add(Tensor a, Tensor b) { return binary(Op::add, a, b); }
Tensor sub(Tensor a, Tensor b) { return binary(Op::sub, a, b); }
Tensor mul(Tensor a, Tensor b) { return binary(Op::mul, a, b); }
Tensor div(Tensor a, Tensor b) { return binary(Op::div, a, b); }
Tensor equal(Tensor a, Tensor b) { return binary(Op::equal, a, b); }

Tensor sum(Tensor x, std::vector<int64_t> axes, bool keepdims) { return reduce(Op::sum, x, std::move(axes), keepdims); }
Tensor mean(Tensor x, std::vector<int64_t> axes, bool keepdims) {
  return reduce(Op::mean, x, std::move(axes), keepdims);
}
Tensor max(Tensor x, std::vector<int64_t> axes, bool keepdims) { return reduce(Op::max, x, std::move(axes), keepdims); }

Tensor softmax(Tensor x, int64_t axis) {
  return unary(Op::softmax, x, AxisAttrs{norm_axis(Op::softmax, axis, x.rank())});
}
Tensor log_softmax(Tensor x, int64_t axis) {
  return unary(Op::log_softmax, x, AxisAttrs{norm_axis(Op::log_softmax, axis, x.rank())});
}

Tensor matmul(Tensor a, Tensor b, bool trans_a, bool trans_b) {
  constexpr Op op = Op::matmul;
  Graph& g = graph_of(op, {a, b});
  require_float(op, a);
  if (a.dtype() != b.dtype()) fail(op, "dtypes differ");
  if (a.rank() < 2 || b.rank() < 2) {
    fail(op, "inputs must have rank >= 2, got " + shape_str(a.shape()) + " and " + shape_str(b.shape()));
  }
  int64_t m = trans_a ? a.dim(-1) : a.dim(-2), ka = trans_a ? a.dim(-2) : a.dim(-1);
  int64_t kb = trans_b ? b.dim(-1) : b.dim(-2), n = trans_b ? b.dim(-2) : b.dim(-1);
  if (ka != kb) {
    fail(op, "inner dimensions differ: " + shape_str(a.shape()) + (trans_a ? "^T" : "") + " x " + shape_str(b.shape()) +
                 (trans_b ? "^T" : ""));
  }
  const Shape as = a.shape(), bs = b.shape();
  Shape ba(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  if (!ba.empty() && !bb.empty() && ba != bb) {
    fail(op, "batch dimensions differ: " + shape_str(a.shape()) + " and " + shape_str(b.shape()));
  }
  Shape out = ba.empty() ? bb : ba;
  out.push_back(m);
  out.push_back(n);
  return g.add_node(op, MatmulAttrs{trans_a, trans_b}, {a.id, b.id}, TensorType{a.dtype(), out});
}

namespace {
Shape conv_output_shape(Op op, const Shape& x, const Shape& w, const ConvAttrs& a) {
  if (x.size() != 4 || w.size() != 4) {
    fail(op, "expects x [N,C,H,W] and w [O,C/groups,KH,KW], got " + shape_str(x) + " and " + shape_str(w));
  }
  if (a.groups < 1 || x[1] % a.groups || w[0] % a.groups || w[1] * a.groups != x[1]) {
    fail(op, "channels do not fit groups=" + std::to_string(a.groups) + ": x " + shape_str(x) + ", w " + shape_str(w));
  }
  for (int i = 0; i < 2; ++i) {
    if (a.stride[i] < 1 || a.dilation[i] < 1 || a.pad[i] < 0)
      fail(op, "stride and dilation must be >= 1, padding >= 0");
  }
  int64_t oh = conv_out(x[2], w[2], a.stride[0], a.pad[0], a.dilation[0]);
  int64_t ow = conv_out(x[3], w[3], a.stride[1], a.pad[1], a.dilation[1]);
  if (oh < 1 || ow < 1) {
    fail(op, "kernel " + shape_str(w) + " does not fit input " + shape_str(x) + " with this padding");
  }
  return {x[0], w[0], oh, ow};
}
}  // namespace

Tensor conv2d(Tensor x, Tensor w, const Conv2dOptions& o) {
  constexpr Op op = Op::conv2d;
  Graph& g = graph_of(op, {x, w});
  require_float(op, x);
  if (x.dtype() != w.dtype()) fail(op, "dtypes differ");
  ConvAttrs a;
  a.stride[0] = o.stride_h;
  a.stride[1] = o.stride_w;
  a.pad[0] = o.pad_h;
  a.pad[1] = o.pad_w;
  a.dilation[0] = o.dilation_h;
  a.dilation[1] = o.dilation_w;
  a.groups = o.groups;
  Shape out = conv_output_shape(op, x.shape(), w.shape(), a);
  return g.add_node(op, a, {x.id, w.id}, TensorType{x.dtype(), out});
}

Tensor conv2d_backward_input(Tensor dy, Tensor w, const ConvAttrs& a) {
  constexpr Op op = Op::conv2d_backward_input;
  Graph& g = graph_of(op, {dy, w});
  if (conv_output_shape(op, a.grad_shape, w.shape(), a) != dy.shape()) {
    fail(op, "gradient " + shape_str(dy.shape()) + " does not match input " + shape_str(a.grad_shape));
  }
  return g.add_node(op, a, {dy.id, w.id}, TensorType{dy.dtype(), a.grad_shape});
}

Tensor conv2d_backward_weight(Tensor x, Tensor dy, const ConvAttrs& a) {
  constexpr Op op = Op::conv2d_backward_weight;
  Graph& g = graph_of(op, {x, dy});
  if (conv_output_shape(op, x.shape(), a.grad_shape, a) != dy.shape()) {
    fail(op, "gradient " + shape_str(dy.shape()) + " does not match weight " + shape_str(a.grad_shape));
  }
  return g.add_node(op, a, {x.id, dy.id}, TensorType{dy.dtype(), a.grad_shape});
}

Tensor conv1d(Tensor x, Tensor w, int64_t stride, int64_t pad, int64_t dilation, int64_t groups) {
  if (x.rank() != 3 || w.rank() != 3) {
    throw std::invalid_argument("[conv1d] expects x [N,C,L] and w [O,C/groups,K], got " + shape_str(x.shape()) +
                                " and " + shape_str(w.shape()));
  }
  Conv2dOptions o;
  o.stride_w = stride;
  o.pad_w = pad;
  o.dilation_w = dilation;
  o.groups = groups;
  Tensor y = conv2d(reshape(x, {x.dim(0), x.dim(1), 1, x.dim(2)}), reshape(w, {w.dim(0), w.dim(1), 1, w.dim(2)}), o);
  return reshape(y, {y.dim(0), y.dim(1), y.dim(3)});
}

namespace {
Shape pool_output_shape(Op op, const Shape& x, const PoolAttrs& a) {
  if (x.size() != 4) fail(op, "expects [N,C,H,W], got " + shape_str(x));
  for (int i = 0; i < 2; ++i) {
    if (a.kernel[i] < 1 || a.stride[i] < 1 || a.pad[i] < 0 || 2 * a.pad[i] > a.kernel[i]) {
      fail(op, "needs kernel >= 1, stride >= 1 and 0 <= padding <= kernel/2");
    }
  }
  int64_t oh = conv_out(x[2], a.kernel[0], a.stride[0], a.pad[0], 1);
  int64_t ow = conv_out(x[3], a.kernel[1], a.stride[1], a.pad[1], 1);
  if (oh < 1 || ow < 1) fail(op, "kernel does not fit input " + shape_str(x));
  return {x[0], x[1], oh, ow};
}
PoolAttrs pool_attrs(int64_t k, int64_t s, int64_t p) {
  PoolAttrs a;
  a.kernel[0] = a.kernel[1] = k;
  a.stride[0] = a.stride[1] = s;
  a.pad[0] = a.pad[1] = p;
  return a;
}
}  // namespace

Tensor max_pool2d(Tensor x, int64_t kernel, int64_t stride, int64_t pad) {
  PoolAttrs a = pool_attrs(kernel, stride, pad);
  Shape out = pool_output_shape(Op::max_pool2d, x.shape(), a);
  require_float(Op::max_pool2d, x);
  return x.graph->add_node(Op::max_pool2d, a, {x.id}, TensorType{x.dtype(), out});
}
Tensor max_pool2d_backward(Tensor x, Tensor dy, const PoolAttrs& a) {
  constexpr Op op = Op::max_pool2d_backward;
  if (pool_output_shape(op, x.shape(), a) != dy.shape()) fail(op, "gradient shape does not match");
  return graph_of(op, {x, dy}).add_node(op, a, {x.id, dy.id}, x.type());
}
Tensor avg_pool2d(Tensor x, int64_t kernel, int64_t stride, int64_t pad) {
  PoolAttrs a = pool_attrs(kernel, stride, pad);
  Shape out = pool_output_shape(Op::avg_pool2d, x.shape(), a);
  require_float(Op::avg_pool2d, x);
  return x.graph->add_node(Op::avg_pool2d, a, {x.id}, TensorType{x.dtype(), out});
}
Tensor avg_pool2d_backward(Tensor dy, const PoolAttrs& a) {
  constexpr Op op = Op::avg_pool2d_backward;
  if (pool_output_shape(op, a.grad_shape, a) != dy.shape()) fail(op, "gradient shape does not match");
  return graph_of(op, {dy}).add_node(op, a, {dy.id}, TensorType{dy.dtype(), a.grad_shape});
}
Tensor global_avg_pool2d(Tensor x) {
  if (x.rank() != 4) throw std::invalid_argument("[global_avg_pool2d] expects [N,C,H,W], got " + shape_str(x.shape()));
  return mean(x, {2, 3});
}
Tensor upsample_nearest2x(Tensor x) {
  constexpr Op op = Op::upsample_nearest2x;
  if (x.rank() != 4) fail(op, "expects [N,C,H,W], got " + shape_str(x.shape()));
  require_float(op, x);
  Shape s = x.shape();
  s[2] *= 2;
  s[3] *= 2;
  return x.graph->add_node(op, NoAttrs{}, {x.id}, TensorType{x.dtype(), s});
}

Tensor reshape(Tensor x, Shape shape) {
  constexpr Op op = Op::reshape;
  Graph& g = graph_of(op, {x});
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) fail(op, "more than one -1 in " + shape_str(shape));
      infer = int64_t(i);
    } else if (shape[i] < 0) {
      fail(op, "negative dimension in " + shape_str(shape));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.type().numel() % known)
      fail(op, "cannot infer -1 in " + shape_str(shape) + " from " + shape_str(x.shape()));
    shape[size_t(infer)] = x.type().numel() / known;
  }
  if (numel(shape) != x.type().numel()) {
    fail(op, "cannot reshape " + shape_str(x.shape()) + " to " + shape_str(shape));
  }
  if (shape == x.shape()) return x;
  return g.add_node(op, ShapeAttrs{shape}, {x.id}, TensorType{x.dtype(), shape});
}

Tensor permute(Tensor x, std::vector<int64_t> perm) {
  constexpr Op op = Op::permute;
  Graph& g = graph_of(op, {x});
  if (int64_t(perm.size()) != x.rank()) fail(op, "permutation has wrong length for " + shape_str(x.shape()));
  std::vector<bool> seen(perm.size());
  Shape out;
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) {
    int64_t p = norm_axis(op, perm[i], x.rank());
    if (seen[size_t(p)]) fail(op, "axis " + std::to_string(p) + " repeated in permutation");
    seen[size_t(p)] = true;
    perm[i] = p;
    identity &= p == int64_t(i);
    out.push_back(x.shape()[size_t(p)]);
  }
  if (identity) return x;
  return g.add_node(op, PermuteAttrs{perm}, {x.id}, TensorType{x.dtype(), out});
}

Tensor transpose(Tensor x, int64_t a, int64_t b) {
  std::vector<int64_t> perm(size_t(x.rank()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[size_t(norm_axis(Op::permute, a, x.rank()))], perm[size_t(norm_axis(Op::permute, b, x.rank()))]);
  return permute(x, perm);
}

Tensor slice(Tensor x, std::vector<int64_t> starts, std::vector<int64_t> ends) {
  constexpr Op op = Op::slice;
  Graph& g = graph_of(op, {x});
  if (int64_t(starts.size()) != x.rank() || int64_t(ends.size()) != x.rank())
    fail(op, "needs a start and end per axis of " + shape_str(x.shape()));
  Shape out;
  for (size_t i = 0; i < starts.size(); ++i) {
    if (starts[i] < 0 || starts[i] > ends[i] || ends[i] > x.shape()[i]) {
      fail(op, "range [" + std::to_string(starts[i]) + "," + std::to_string(ends[i]) + ") out of bounds for axis " +
                   std::to_string(i) + " of " + shape_str(x.shape()));
    }
    out.push_back(ends[i] - starts[i]);
  }
  if (out == x.shape()) return x;
  return g.add_node(op, SliceAttrs{starts, ends}, {x.id}, TensorType{x.dtype(), out});
}

Tensor slice_axis(Tensor x, int64_t axis, int64_t start, int64_t end) {
  int64_t a = norm_axis(Op::slice, axis, x.rank());
  std::vector<int64_t> s(size_t(x.rank()), 0);
  Shape e = x.shape();
  s[size_t(a)] = start;
  e[size_t(a)] = end;
  return slice(x, s, e);
}

Tensor pad(Tensor x, std::vector<int64_t> before, std::vector<int64_t> after) {
  constexpr Op op = Op::pad;
  Graph& g = graph_of(op, {x});
  if (int64_t(before.size()) != x.rank() || int64_t(after.size()) != x.rank())
    fail(op, "needs padding per axis of " + shape_str(x.shape()));
  Shape out = x.shape();
  for (size_t i = 0; i < out.size(); ++i) {
    if (before[i] < 0 || after[i] < 0) fail(op, "padding must be non-negative");
    out[i] += before[i] + after[i];
  }
  return g.add_node(op, PadAttrs{before, after}, {x.id}, TensorType{x.dtype(), out});
}

Tensor concat(std::vector<Tensor> xs, int64_t axis) {
  constexpr Op op = Op::concat;
  if (xs.empty()) fail(op, "needs at least one input");
  if (xs.size() == 1) return xs[0];
  Graph& g = graph_of(op, {xs[0]});
  int64_t a = norm_axis(op, axis, xs[0].rank());
  Shape out = xs[0].shape();
  out[size_t(a)] = 0;
  std::vector<NodeId> ids;
  for (const Tensor& t : xs) {
    if (t.graph != &g) fail(op, "inputs come from different graphs");
    Shape s = t.shape();
    if (s.size() != out.size() || t.dtype() != xs[0].dtype()) fail(op, "inputs differ in rank or dtype");
    for (size_t i = 0; i < s.size(); ++i) {
      if (int64_t(i) != a && s[i] != out[i])
        fail(op, "shapes " + shape_str(xs[0].shape()) + " and " + shape_str(s) + " differ off the concat axis");
    }
    out[size_t(a)] += s[size_t(a)];
    ids.push_back(t.id);
  }
  return g.add_node(op, AxisAttrs{a}, ids, TensorType{xs[0].dtype(), out});
}

Tensor broadcast_to(Tensor x, Shape shape) {
  constexpr Op op = Op::broadcast_to;
  Graph& g = graph_of(op, {x});
  if (broadcast_shapes(op, x.shape(), shape) != shape) {
    fail(op, "cannot broadcast " + shape_str(x.shape()) + " to " + shape_str(shape));
  }
  if (shape == x.shape()) return x;
  return g.add_node(op, ShapeAttrs{shape}, {x.id}, TensorType{x.dtype(), shape});
}

Tensor sum_to(Tensor x, const Shape& shape) {
  if (x.shape() == shape) return x;
  size_t lead = x.shape().size() - shape.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < x.shape().size(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && x.shape()[i] != 1)) axes.push_back(int64_t(i));
  }
  Tensor s = axes.empty() ? x : sum(x, axes, true);
  return reshape(s, shape);
}

Tensor embedding(Tensor table, Tensor ids) {
  constexpr Op op = Op::embedding;
  Graph& g = graph_of(op, {table, ids});
  if (table.rank() != 2) fail(op, "table must be [rows, dim], got " + shape_str(table.shape()));
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::u32) fail(op, "ids must be i32 or u32");
  Shape out = ids.shape();
  out.push_back(table.dim(1));
  return g.add_node(op, EmbeddingAttrs{table.dim(0)}, {table.id, ids.id}, TensorType{table.dtype(), out});
}

Tensor embedding_backward(Tensor dy, Tensor ids, int64_t num_rows) {
  constexpr Op op = Op::embedding_backward;
  Graph& g = graph_of(op, {dy, ids});
  Shape expect = ids.shape();
  expect.push_back(dy.dim(-1));
  if (dy.shape() != expect)
    fail(op, "gradient " + shape_str(dy.shape()) + " does not match ids " + shape_str(ids.shape()));
  if (num_rows < 1) fail(op, "num_rows must be positive");
  return g.add_node(op, EmbeddingAttrs{num_rows}, {dy.id, ids.id}, TensorType{dy.dtype(), {num_rows, dy.dim(-1)}});
}

Tensor one_hot(Tensor ids, int64_t classes, int64_t ignore_index) {
  constexpr Op op = Op::one_hot;
  Graph& g = graph_of(op, {ids});
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::u32) fail(op, "ids must be i32 or u32");
  if (classes < 1) fail(op, "classes must be positive");
  Shape out = ids.shape();
  out.push_back(classes);
  return g.add_node(op, OneHotAttrs{classes, ignore_index}, {ids.id}, TensorType{DType::f32, out});
}

Tensor rope(Tensor x, double theta, bool inverse) {
  constexpr Op op = Op::rope;
  if (x.rank() < 2 || x.dim(-1) % 2) fail(op, "expects [..., seq, dim] with even dim, got " + shape_str(x.shape()));
  return unary(op, x, RopeAttrs{theta, inverse});
}

Tensor causal_mask(Tensor x, double fill) {
  if (x.rank() < 2) fail(Op::causal_mask, "expects rank >= 2, got " + shape_str(x.shape()));
  return unary(Op::causal_mask, x, MaskAttrs{fill});
}

Tensor lr_schedule(Tensor step, const ScheduleAttrs& a) {
  if (step.rank() != 0) fail(Op::lr_schedule, "expects a scalar step counter");
  if (a.warmup < 0 || a.total < 0 || (a.total && a.total <= a.warmup))
    fail(Op::lr_schedule, "needs 0 <= warmup < total (or total = 0)");
  if (step.dtype() != DType::f32 && step.dtype() != DType::i32)
    fail(Op::lr_schedule, "the step counter must be f32 or i32");
  return graph_of(Op::lr_schedule, {step}).add_node(Op::lr_schedule, a, {step.id}, TensorType{DType::f32, {}});
}

Tensor bias_correction(Tensor step, double beta, double power) {
  constexpr Op op = Op::bias_correction;
  if (step.rank() != 0) fail(op, "expects a scalar step counter");
  if (step.dtype() != DType::f32 && step.dtype() != DType::i32) fail(op, "the step counter must be f32 or i32");
  if (!(beta >= 0 && beta < 1)) fail(op, "beta must be in [0, 1)");
  return graph_of(op, {step}).add_node(op, BiasCorrectionAttrs{beta, power}, {step.id}, TensorType{DType::f32, {}});
}

Tensor increment(Tensor counter) {
  constexpr Op op = Op::increment;
  if (counter.rank() != 0 || counter.dtype() != DType::i32) {
    fail(op,
         "expects an i32 scalar counter, got " + std::string(dtype_name(counter.dtype())) + shape_str(counter.shape()));
  }
  return graph_of(op, {counter}).add_node(op, NoAttrs{}, {counter.id}, counter.type());
}

}  // namespace meganeura
