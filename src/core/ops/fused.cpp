// The fused ops. The rewrite passes (passes.h) create them from primitives after autodiff, so
// they are never differentiated; the pass-equivalence tests check them.
//   fused_elementwise  a postfix program over broadcast inputs, up to three outputs
//   fused_reduce       a program evaluated over a domain and reduced (sum, mean, max) as it runs
//   matmul_epilogue    a GEMM whose product feeds a program (bias, activation, residual)
//   norm               RMS or layer norm over the last axis, with optional scale and shift
//   softmax_scaled     softmax(causal_mask(x * scale)) over the last axis
//   fused_output       output k >= 1 of a multi-output fused_elementwise: planned as one more
//                      write of that dispatch, never dispatched itself
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

double arithmetic(const std::vector<FusedInstr>& code) {
  double n = 0;
  for (const FusedInstr& f : code) n += (f.kind == FusedInstr::unary || f.kind == FusedInstr::binary);
  return n;
}

OpCost elementwise_cost(const CostArgs& c) {
  const auto& code = c.attrs<FusedAttrs>().code;
  // the secondary outputs' bytes, beyond the node's own output
  return {arithmetic(code) * c.out(), double(fused_outputs(code) - 1) * double(c.node.type.bytes())};
}
OpCost reduce_cost(const CostArgs& c) {
  const auto& a = c.attrs<FusedAttrs>();
  return {(1 + arithmetic(a.code)) * double(numel(a.domain)), 0};
}
OpCost epilogue_cost(const CostArgs& c) {
  const auto& a = c.attrs<FusedAttrs>();
  const Shape& as = c.in_shape(0);
  const double k = double(a.matmul.trans_a ? as[as.size() - 2] : as.back());
  return {2.0 * c.out() * k + arithmetic(a.code) * c.out(), 0};
}

constexpr OpSpec fused(int arity, Cost cost, CpuKernel cpu, VkKernel vulkan, int inplace_input = -1) {
  return OpSpec{.family = OpFamily::fused,
                .arity = arity,
                .grad = GradKind::fused,
                .cost = cost,
                .cpu = cpu,
                .vulkan = vulkan,
                .inplace_input = inplace_input};
}

}  // namespace
}  // namespace meganeura::ops

MEGANEURA_DEFINE_OP_(fused_elementwise, fused(-1, cost::of(elementwise_cost), CpuKernel::fused, VkKernel::fused, 0))
MEGANEURA_DEFINE_OP_(fused_reduce, fused(-1, cost::of(reduce_cost), CpuKernel::fused, VkKernel::fused))
MEGANEURA_DEFINE_OP_(matmul_epilogue, fused(-1, cost::of(epilogue_cost), CpuKernel::fused, VkKernel::fused))
MEGANEURA_DEFINE_OP_(norm, fused(-1, cost::per_output(4), CpuKernel::fused, VkKernel::fused))
MEGANEURA_DEFINE_OP_(softmax_scaled, fused(1, cost::per_output(5), CpuKernel::fused, VkKernel::fused, 0))
MEGANEURA_DEFINE_OP_(fused_output, fused(1, cost::none(), CpuKernel::none, VkKernel::none))
