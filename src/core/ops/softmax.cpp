// softmax and log_softmax along one axis. Both read whole rows, so neither is computed in
// place unless every kernel could guarantee it.
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

Grads softmax_rule(const VjpArgs& a) {
  const int64_t ax = a.attrs<AxisAttrs>().axis;
  return {a.y * (a.g - sum(a.g * a.y, {ax}, true))};
}
Grads log_softmax_rule(const VjpArgs& a) {
  const int64_t ax = a.attrs<AxisAttrs>().axis;
  return {a.g - exp(a.y) * sum(a.g, {ax}, true)};
}

constexpr OpSpec along_axis(VjpFn rule) {
  return OpSpec{.family = OpFamily::reduce,
                .arity = 1,
                .grad = GradKind::vjp,
                .cost = cost::per_output(5),
                .cpu = CpuKernel::reduce,
                .vulkan = VkKernel::reduce,
                .vjp = rule};
}

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::softmax(Tensor x, int64_t axis) {
  return ops::unary_node(Op::softmax, x, AxisAttrs{ops::norm_axis(Op::softmax, axis, x.rank())});
}
meganeura::Tensor meganeura::log_softmax(Tensor x, int64_t axis) {
  return ops::unary_node(Op::log_softmax, x, AxisAttrs{ops::norm_axis(Op::log_softmax, axis, x.rank())});
}

MEGANEURA_DEFINE_OP_(softmax, along_axis(softmax_rule))
MEGANEURA_DEFINE_OP_(log_softmax, along_axis(log_softmax_rule))
