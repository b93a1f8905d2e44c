// Max and average pooling over NCHW (square or rectangular windows, stride, padding of at most
// half a window), and their gradients, which appear only inside the backward pass.
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

Shape pool_output_shape(Op op, const Shape& x, const PoolAttrs& a) {
  if (x.size() != 4) fail(op, "expects [N,C,H,W], got " + shape_str(x));
  for (int i = 0; i < 2; ++i) {
    if (a.kernel[i] < 1 || a.stride[i] < 1 || a.pad[i] < 0 || 2 * a.pad[i] > a.kernel[i]) {
      fail(op, "needs kernel >= 1, stride >= 1 and 0 <= padding <= kernel/2");
    }
  }
  const int64_t oh = (x[2] + 2 * a.pad[0] - a.kernel[0]) / a.stride[0] + 1;
  const int64_t ow = (x[3] + 2 * a.pad[1] - a.kernel[1]) / a.stride[1] + 1;
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

Tensor pool(Op op, Tensor x, const PoolAttrs& a) {
  const Shape out = pool_output_shape(op, x.shape(), a);
  require_float(op, x);
  return graph_internal::add_node(graph_of(op, {x}), op, a, {x.id}, TensorType{x.dtype(), out});
}

Grads max_rule(const VjpArgs& a) { return {max_pool2d_backward(a.x(), a.g, a.attrs<PoolAttrs>())}; }
Grads avg_rule(const VjpArgs& a) {
  PoolAttrs p = a.attrs<PoolAttrs>();
  p.grad_shape = a.x().shape();
  return {avg_pool2d_backward(a.g, p)};
}

OpCost window_flops(const CostArgs& c) {
  const auto& p = c.attrs<PoolAttrs>();
  return {c.out() * double(p.kernel[0] * p.kernel[1]), 0};
}

constexpr OpSpec forward(VjpFn rule) {
  return OpSpec{.family = OpFamily::pool,
                .arity = 1,
                .grad = GradKind::vjp,
                .cost = cost::of(window_flops),
                .cpu = CpuKernel::pool,
                .vulkan = VkKernel::pool,
                .vjp = rule};
}
constexpr OpSpec backward(int arity, Op forward_op) {
  return OpSpec{.family = OpFamily::pool,
                .arity = arity,
                .grad = GradKind::backward_only,
                .cost = cost::none(),
                .cpu = CpuKernel::pool,
                .vulkan = VkKernel::pool,
                .checked_by = forward_op};
}

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::max_pool2d(Tensor x, int64_t kernel, int64_t stride, int64_t pad) {
  return ops::pool(Op::max_pool2d, x, ops::pool_attrs(kernel, stride, pad));
}
meganeura::Tensor meganeura::avg_pool2d(Tensor x, int64_t kernel, int64_t stride, int64_t pad) {
  return ops::pool(Op::avg_pool2d, x, ops::pool_attrs(kernel, stride, pad));
}
meganeura::Tensor meganeura::max_pool2d_backward(Tensor x, Tensor dy, const PoolAttrs& a) {
  constexpr Op op = Op::max_pool2d_backward;
  if (ops::pool_output_shape(op, x.shape(), a) != dy.shape()) ops::fail(op, "gradient shape does not match");
  return graph_internal::add_node(ops::graph_of(op, {x, dy}), op, a, {x.id, dy.id}, x.type());
}
meganeura::Tensor meganeura::avg_pool2d_backward(Tensor dy, const PoolAttrs& a) {
  constexpr Op op = Op::avg_pool2d_backward;
  if (ops::pool_output_shape(op, a.grad_shape, a) != dy.shape()) ops::fail(op, "gradient shape does not match");
  return graph_internal::add_node(ops::graph_of(op, {dy}), op, a, {dy.id}, TensorType{dy.dtype(), a.grad_shape});
}

MEGANEURA_DEFINE_OP_(max_pool2d, forward(max_rule))
MEGANEURA_DEFINE_OP_(max_pool2d_backward, backward(2, Op::max_pool2d))
MEGANEURA_DEFINE_OP_(avg_pool2d, forward(avg_rule))
MEGANEURA_DEFINE_OP_(avg_pool2d_backward, backward(1, Op::avg_pool2d))
