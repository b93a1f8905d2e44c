// The loop budget: the planned loop bounds of the kernels lowered with their own push layouts,
// and the check every launch passes before it is recorded.
#include <string>

#include "backend/vulkan/lowering_internal.h"

namespace meganeura::vk::detail {
namespace {

// matmul.comp: per BK-deep step, the two cooperative tile loads and the kk loop (its TM x TN
// register loops over literal sizes are unrolled; lavapipe measured 36 back-edges per step
// with 32x32x16 tiles over 64 invocations, as this counts).
uint64_t matmul_bound(const Launch& l) {
  const uint64_t k = l.push[2], threads = l.spec[0], bm = l.spec[1], bn = l.spec[2], bk = l.spec[3];
  const uint64_t step = strided(bk * bm, threads) + strided(bk * bn, threads) + loop(bk);
  constexpr uint64_t kRegisterBlock = 4;
  return nest(ceil_div(k, bk), step) + loop(kRegisterBlock * kRegisterBlock) +
         nest(kRegisterBlock, loop(kRegisterBlock));
}

// conv.comp, one output (forward), input (input gradient) or weight (weight gradient) element
// per invocation.
uint64_t conv_bound(const Launch& l) {
  const uint32_t* w = l.push;
  const uint64_t op = w[1], n = w[2], c = w[3], o = w[6], kh = w[7], kw = w[8], oh = w[9], ow = w[10], groups = w[11];
  switch (op) {
    case 0: return nest(c / groups, nest(kh, loop(kw)));
    case 1: return nest(o / groups, nest(kh, loop(kw)));
    default: return nest(n, nest(oh, loop(ow)));
  }
}

}  // namespace

uint64_t primitive_loop_bound(const Launch& l) {
  switch (l.kernel) {
    case Kernel::pointwise:  // push: n, op, binary, rank, contiguous; binary ops over a strided layout walk its rank
      return l.push[2] != 0 && l.push[4] == 0 ? loop(l.push[3]) : 0;
    case Kernel::movement: return l.push[2] != 0 ? 0 : loop(l.push[1]);  // concat copies rows
    case Kernel::sequence: {
      constexpr uint32_t kBiasCorrection = 3, kSeriesTerms = 8;  // expm1's Taylor series
      return l.push[1] == kBiasCorrection ? loop(kSeriesTerms) : 0;
    }
    case Kernel::matmul: return matmul_bound(l);
    case Kernel::conv: return conv_bound(l);
    case Kernel::fused:
      if (l.push[kPushMode] != 0) return Launch::kUnplanned;  // the reductions plan their own
      return fused_program_cost(l);
    case Kernel::reduce:
    case Kernel::softmax:
    case Kernel::index:
    case Kernel::pool:
    case Kernel::rows:
    case Kernel::rows_subgroup:
    case Kernel::reduce_subgroup:
    case Kernel::attention:
    case Kernel::attention_rows:
    case Kernel::workload:
    case Kernel::count_: return Launch::kUnplanned;
  }
  return Launch::kUnplanned;
}

void check_launch(const Dispatch& d, const Launch& l, const DeviceClass& dc) {
  const std::string kernel = kernel_name(l.kernel);
  if (l.loop_iterations == Launch::kUnplanned) unsupported(d.op, "the " + kernel + " kernel's loops are not planned");
  if (l.loop_iterations > dc.loop_budget) {
    unsupported(d.op, "a launch of the " + kernel + " kernel plans " + std::to_string(l.loop_iterations) +
                          " loop iterations per invocation, above the device's budget of " +
                          std::to_string(dc.loop_budget));
  }
  const uint32_t wg = l.spec.empty() ? 1 : l.spec[0];
  if (wg > dc.max_workgroup_invocations || wg > dc.max_workgroup_size_x) {
    unsupported(d.op, "a workgroup of " + std::to_string(wg) + " invocations for the " + kernel +
                          " kernel exceeds the device's limit of " +
                          std::to_string(std::min(dc.max_workgroup_invocations, dc.max_workgroup_size_x)));
  }
}

}  // namespace meganeura::vk::detail
