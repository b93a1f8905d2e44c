// conv2d over NCHW with OIHW weights (stride, padding, dilation, groups), and its two
// gradients, which appear only inside the backward pass.
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

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
  const int64_t oh = conv_out(x[2], w[2], a.stride[0], a.pad[0], a.dilation[0]);
  const int64_t ow = conv_out(x[3], w[3], a.stride[1], a.pad[1], a.dilation[1]);
  if (oh < 1 || ow < 1)
    fail(op, "kernel " + shape_str(w) + " does not fit input " + shape_str(x) + " with this padding");
  return {x[0], w[0], oh, ow};
}

Grads rule(const VjpArgs& a) {
  ConvAttrs ai = a.attrs<ConvAttrs>(), aw = ai;
  ai.grad_shape = a.x().shape();
  aw.grad_shape = a.in(1).shape();
  return {conv2d_backward_input(a.g, a.in(1), ai), conv2d_backward_weight(a.x(), a.g, aw)};
}

// 2 FLOPs per (output element, weight of its window), for the forward convolution the op
// computes or reverses; `y` is the forward output's shape, `w` the weight's.
double conv_flops(const Shape& y, const Shape& w) { return 2.0 * double(numel(y)) * double(w[1] * w[2] * w[3]); }
OpCost forward_flops(const CostArgs& c) { return {conv_flops(c.node.type.shape, c.in_shape(1)), 0}; }
OpCost input_grad_flops(const CostArgs& c) { return {conv_flops(c.in_shape(0), c.in_shape(1)), 0}; }
OpCost weight_grad_flops(const CostArgs& c) { return {conv_flops(c.in_shape(1), c.node.type.shape), 0}; }

constexpr OpSpec conv(GradKind grad, Cost cost, VjpFn vjp) {
  return OpSpec{.family = OpFamily::conv,
                .arity = 2,
                .grad = grad,
                .cost = cost,
                .cpu = CpuKernel::conv,
                .vulkan = VkKernel::conv,
                .vjp = vjp,
                .checked_by = grad == GradKind::backward_only ? Op::conv2d : Op::count_};
}

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::conv2d(Tensor x, Tensor w, const Conv2dOptions& o) {
  constexpr Op op = Op::conv2d;
  Graph& g = ops::graph_of(op, {x, w});
  ops::require_float(op, x);
  if (x.dtype() != w.dtype()) ops::fail(op, "dtypes differ");
  ConvAttrs a;
  a.stride[0] = o.stride_h;
  a.stride[1] = o.stride_w;
  a.pad[0] = o.pad_h;
  a.pad[1] = o.pad_w;
  a.dilation[0] = o.dilation_h;
  a.dilation[1] = o.dilation_w;
  a.groups = o.groups;
  const Shape out = ops::conv_output_shape(op, x.shape(), w.shape(), a);
  return graph_internal::add_node(g, op, a, {x.id, w.id}, TensorType{x.dtype(), out});
}

meganeura::Tensor meganeura::conv2d_backward_input(Tensor dy, Tensor w, const ConvAttrs& a) {
  constexpr Op op = Op::conv2d_backward_input;
  Graph& g = ops::graph_of(op, {dy, w});
  if (ops::conv_output_shape(op, a.grad_shape, w.shape(), a) != dy.shape()) {
    ops::fail(op, "gradient " + shape_str(dy.shape()) + " does not match input " + shape_str(a.grad_shape));
  }
  return graph_internal::add_node(g, op, a, {dy.id, w.id}, TensorType{dy.dtype(), a.grad_shape});
}

meganeura::Tensor meganeura::conv2d_backward_weight(Tensor x, Tensor dy, const ConvAttrs& a) {
  constexpr Op op = Op::conv2d_backward_weight;
  Graph& g = ops::graph_of(op, {x, dy});
  if (ops::conv_output_shape(op, x.shape(), a.grad_shape, a) != dy.shape()) {
    ops::fail(op, "gradient " + shape_str(dy.shape()) + " does not match weight " + shape_str(a.grad_shape));
  }
  return graph_internal::add_node(g, op, a, {x.id, dy.id}, TensorType{dy.dtype(), a.grad_shape});
}

MEGANEURA_DEFINE_OP_(conv2d, conv(GradKind::vjp, cost::of(forward_flops), rule))
MEGANEURA_DEFINE_OP_(conv2d_backward_input, conv(GradKind::backward_only, cost::of(input_grad_flops), nullptr))
MEGANEURA_DEFINE_OP_(conv2d_backward_weight, conv(GradKind::backward_only, cost::of(weight_grad_flops), nullptr))
