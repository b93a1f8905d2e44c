// The loop budget: the planned loop bounds of the kernels lowered with their own push layouts,
// and the check every launch passes before it is recorded.
#include <string>

#include "backend/vulkan/lowering_internal.h"

namespace meganeura::vk::detail {
namespace {

// The workgroup reductions of group.glsl (rows, workload) and fused.comp keep one partial per
// invocation (or subgroup) in partial[256].
constexpr uint64_t kGroupPartials = 256;
bool group_partials(Kernel k) {
  return k == Kernel::rows || k == Kernel::rows_subgroup || k == Kernel::workload || k == Kernel::fused;
}

}  // namespace

uint64_t primitive_loop_bound(const Launch& l) {
  switch (l.kernel) {
    case Kernel::pointwise:  // push: n, op, binary, rank, contiguous; binary ops over a strided layout walk its rank
      return l.push[2] != 0 && l.push[4] == 0 ? loop(l.push[3]) : 0;
    case Kernel::movement: return l.push[2] != 0 ? 0 : loop(l.push[1]);  // concat copies rows
    case Kernel::half: return 0;
    case Kernel::sequence: {
      constexpr uint32_t kBiasCorrection = 3, kSeriesTerms = 8;  // expm1's Taylor series
      return l.push[1] == kBiasCorrection ? loop(kSeriesTerms) : 0;
    }
    case Kernel::fused:
      if (l.push[kPushMode] != 0) return Launch::kUnplanned;  // the reductions and 16-bit writes plan their own
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
    case Kernel::matmul:  // the GEMM kernels' lowering (lower_gemm.cpp) plans them
    case Kernel::matmul_fused:
    case Kernel::matmul_reference:
    case Kernel::kv_cache:  // lower_kv_cache.cpp plans them
    case Kernel::top_k:     // lower_gradients.cpp
    case Kernel::matmul_q:  // lower_gradients.cpp
    case Kernel::matmul_q_gemm:
    case Kernel::matmul_q_bytes:
    case Kernel::matmul_q_gemm_bytes:
    case Kernel::conv:
    case Kernel::count_: return Launch::kUnplanned;
  }
  return Launch::kUnplanned;
}

uint64_t shared_memory_bytes(const Launch& l) {
  constexpr uint64_t kFloat = 4;
  switch (l.kernel) {
    case Kernel::reduce:
    case Kernel::reduce_subgroup:
    case Kernel::softmax: return kFloat * l.spec[0];  // partial[gl_WorkGroupSize.x]
    case Kernel::rows:
    case Kernel::rows_subgroup:
    case Kernel::workload:
    case Kernel::fused: return kFloat * kGroupPartials;
    case Kernel::matmul:  // gemm.glsl: as_[2 * BK * (BM / 4 + 1)], bs_[2 * BK * (BN / 4 + 1)] vec4s
    case Kernel::matmul_fused:
    case Kernel::matmul_q_gemm:
    case Kernel::matmul_q_gemm_bytes:
    case Kernel::conv: return 4 * kFloat * 2 * l.spec[11] * (l.spec[9] / 4 + 1 + l.spec[10] / 4 + 1);
    case Kernel::matmul_reference: return kFloat * l.spec[3] * (l.spec[1] + l.spec[2]);  // as_[BK * BM], bs_[BK * BN]
    case Kernel::attention: return kFloat * l.spec[4];                                   // smem[SMEM]
    case Kernel::top_k: return kFloat * (256 + 2 * 1024 + 256 + 4);  // bins, candidates, chunk counts, four words
    case Kernel::pointwise:
    case Kernel::movement:
    case Kernel::index:
    case Kernel::sequence:
    case Kernel::pool:
    case Kernel::attention_rows:
    case Kernel::kv_cache:
    case Kernel::matmul_q:
    case Kernel::matmul_q_bytes:
    case Kernel::half:
    case Kernel::count_: return 0;
  }
  return 0;
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
  if (group_partials(l.kernel) && wg > kGroupPartials) {
    unsupported(d.op, "a workgroup of " + std::to_string(wg) + " invocations for the " + kernel +
                          " kernel exceeds its reductions' width of " + std::to_string(kGroupPartials));
  }
  const uint64_t shared = shared_memory_bytes(l);
  if (shared > dc.max_shared_memory) {
    unsupported(d.op, "a workgroup of the " + kernel + " kernel declares " + std::to_string(shared) +
                          " bytes of shared memory, above the device's limit of " +
                          std::to_string(dc.max_shared_memory));
  }
}

}  // namespace meganeura::vk::detail

namespace meganeura {

VulkanProgramPlan plan_vulkan_program(const Program& p, const VulkanDeviceInfo& device) {
  const vk::DeviceClass dc = vk::device_class(device);
  VulkanProgramPlan plan{.device = device.name, .loop_budget = dc.loop_budget, .dispatches = {}};
  plan.dispatches.resize(p.dispatches.size());
  for (const vk::Launch& l : vk::plan_launches(p, dc)) {
    VulkanLaunchPlan& x = plan.dispatches[l.dispatch].emplace_back();
    x.kernel = vk::kernel_name(l.kernel);
    x.loop_iterations = l.loop_iterations;
    x.workgroup = l.spec.empty() ? 1 : l.spec[0];
    for (int k = 0; k < 3; ++k) x.groups[k] = l.groups[k];
    x.shared_memory_bytes = vk::detail::shared_memory_bytes(l);
  }
  return plan;
}

VulkanDeviceInfo lavapipe_device_info() {
  VulkanDeviceInfo i;
  i.name = "llvmpipe (LLVM 15.0.6, 256 bits)";
  i.vendor = "Mesa";
  i.driver = "llvmpipe Mesa 22.3.6 (LLVM 15.0.6)";
  i.type = "cpu";
  i.subgroup_size = 8;
  i.subgroup_arithmetic = true;
  i.max_storage_buffer_range = 134217728;
  i.max_memory_allocation_size = uint64_t(2) << 30;
  i.min_storage_buffer_offset_alignment = 16;
  i.max_workgroup_invocations = 1024;
  for (int k = 0; k < 3; ++k) i.max_workgroup_count[k] = 65535, i.max_workgroup_size[k] = 1024;
  i.max_shared_memory = 32768;
  i.max_push_constants = 128;
  i.max_storage_buffers_per_stage = 1000000;
  return i;
}

}  // namespace meganeura
