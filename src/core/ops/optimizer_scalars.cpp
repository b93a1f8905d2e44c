// The optimizer's scalar ops: the step counter's increment, the learning-rate schedule and
// Adam's bias correction, each over a scalar step counter (f32 or i32).
#include "graph/internal.h"
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

void require_counter(Op op, Tensor step) {
  if (step.rank() != 0) fail(op, "expects a scalar step counter");
  if (step.dtype() != DType::f32 && step.dtype() != DType::i32) fail(op, "the step counter must be f32 or i32");
}

constexpr OpSpec scalar(int inplace_input) {
  return OpSpec{.family = OpFamily::optim,
                .arity = 1,
                .grad = GradKind::none,
                .cost = cost::none(),
                .cpu = CpuKernel::sequence,
                .vulkan = VkKernel::scalar,
                .inplace_input = inplace_input};
}

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::lr_schedule(Tensor step, const ScheduleAttrs& a) {
  constexpr Op op = Op::lr_schedule;
  if (step.rank() != 0) ops::fail(op, "expects a scalar step counter");
  if (a.warmup < 0 || a.total < 0 || (a.total && a.total <= a.warmup))
    ops::fail(op, "needs 0 <= warmup < total (or total = 0)");
  ops::require_counter(op, step);
  return graph_internal::add_node(ops::graph_of(op, {step}), op, a, {step.id}, TensorType{DType::f32, {}});
}

meganeura::Tensor meganeura::bias_correction(Tensor step, double beta, double power) {
  constexpr Op op = Op::bias_correction;
  ops::require_counter(op, step);
  if (!(beta >= 0 && beta < 1)) ops::fail(op, "beta must be in [0, 1)");
  return graph_internal::add_node(ops::graph_of(op, {step}), op, BiasCorrectionAttrs{beta, power}, {step.id},
                                  TensorType{DType::f32, {}});
}

meganeura::Tensor meganeura::increment(Tensor counter) {
  constexpr Op op = Op::increment;
  if (counter.rank() != 0 || counter.dtype() != DType::i32) {
    ops::fail(op, "expects an i32 scalar counter, got " + std::string(dtype_name(counter.dtype())) +
                      shape_str(counter.shape()));
  }
  return graph_internal::add_node(ops::graph_of(op, {counter}), op, NoAttrs{}, {counter.id}, counter.type());
}

MEGANEURA_DEFINE_OP_(lr_schedule, scalar(-1))
MEGANEURA_DEFINE_OP_(bias_correction, scalar(-1))
MEGANEURA_DEFINE_OP_(increment, scalar(0))
