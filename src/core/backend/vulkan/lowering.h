// Per-dispatch lowering: which kernel, specialisation and push constants, workgroup counts
// and bindings each Program dispatch becomes. Computed once when a program is added, never per
// step. The fused ops take the core schedule's lowering (schedule.h: push block, kernel id);
// the primitive kernels keep their own push layouts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/vulkan/pipelines.h"
#include "meganeura/backend.h"
#include "meganeura/program.h"

namespace meganeura::vk {

struct Launch {
  Kernel kernel = Kernel::pointwise;
  std::vector<uint32_t> spec;  // specialisation constants; [0] is the workgroup size
  uint32_t push[kPushBytes / 4] = {};
  uint32_t push_words = 0;
  uint32_t groups[3] = {1, 1, 1};
  uint32_t bindings[kWideBindings] = {};  // tensor per binding slot
  std::vector<uint32_t> reads;            // tensors read (for hazards)
  uint32_t write = 0;                     // tensor written
  uint32_t dispatch = 0;                  // the Program dispatch it implements
  bool barrier_before = false;            // waits for the previous launch of its own dispatch
  std::vector<uint32_t> code;             // fused programs: 3 words per instruction (also in `spec`)
  uint64_t workspace_bytes = 0;           // scratch bound at kWorkspaceBinding
  // Upper bound of the loop back-edges any one invocation of this launch executes (all loops
  // together), as planned from its sizes: lavapipe leaves every loop of an invocation silently
  // after 65,535, and long-running invocations risk a watchdog on real GPUs. kUnplanned until
  // the lowering plans it; lower_program refuses a launch left unplanned or over the budget.
  uint64_t loop_iterations = kUnplanned;
  static constexpr uint64_t kUnplanned = UINT64_MAX;
};
// The program's workspace: one buffer of the largest launch's scratch, shared by all of them.
// A launch that reads what an earlier launch of its dispatch wrote there waits for it
// (barrier_before); the first launch of a dispatch that uses it waits for any earlier
// dispatch that did.
constexpr uint32_t kWorkspaceBinding = UINT32_MAX - 1;
// Push words the backend fills for the fused kernels (after the schedule's 0-23).
constexpr size_t kPushMode = 24, kPushEpsOrScale = 25, kPushFill = 26, kPushSerial = 27,
                 kPushOutputs = 28,    // fused_elementwise: outputs written (1 to kFusedMaxOutputs)
    kPushChunks = 29, kPushSpan = 30;  // fused_reduce split into pieces: their count and length
// The workload kernels: the mode at kPushMode, the ignored target id (cross-entropy) after it,
// the scatter-add's chunk of indices [first, last); attention: the mode, the scale's f32 bits
// and the causal flag.
constexpr size_t kPushIgnore = 25, kPushFirst = 26, kPushLast = 27, kPushScale = 25, kPushCausal = 26;
// attention_rows: the chunk of the other side [first, last) and whether it is the first (1),
// the last (2) or both.
constexpr size_t kPushChunkFirst = 27, kPushChunkLast = 28, kPushChunkFlags = 29;
// Attention keeps a head's vectors in registers: head dimensions up to this.
constexpr uint32_t kAttentionMaxHead = 128;
// Rows up to this long, when there are many, take one invocation each instead of a workgroup:
// a workgroup's tree and barriers cost more than a short serial loop.
constexpr uint32_t kSerialRowMax = 256, kSerialRowsMin = 64;

// The GEMM kernels (shaders/gemm.glsl): shared-memory tiles (GPUs), direct register blocks
// (CPU-emulated devices), or the first GEMM kernel (comparisons only).
enum class GemmFamily : uint8_t { shared_memory, direct, naive };
// A BM x BN block of C per workgroup, TM x TN results per invocation (multiples of 4); the
// shared-memory kernels stage BK-deep slices.
struct GemmTiles {
  uint32_t bm = 64, bn = 64, bk = 16, tm = 8, tn = 4;
};

// Loop back-edges one invocation may plan: half of lavapipe's 65,535 on CPU-emulated devices;
// elsewhere a bound no legitimate kernel nears (2^24: a runaway loop, not a long GEMM).
constexpr uint64_t kCpuLoopBudget = 32768, kDefaultLoopBudget = uint64_t(1) << 24;

// Tile and workgroup choices for a class of device (not for one driver), and the device limits
// the lowering plans against.
struct DeviceClass {
  uint32_t workgroup = 256;      // elementwise and reductions
  uint32_t row_workgroup = 256;  // the fused kernels' workgroup-per-row reductions
  GemmFamily gemm = GemmFamily::shared_memory;
  // Tiles, largest first: a product takes the first that makes at least gemm_fill workgroups
  // (else the last, and splits K).
  std::vector<GemmTiles> gemm_tiles;
  uint32_t gemm_fill = 256;  // workgroups that keep the device busy: K is split below it
  uint32_t max_groups_x = 65535, max_groups_y = 65535, max_groups_z = 65535;
  uint64_t loop_budget = kDefaultLoopBudget;  // per invocation, all loops together
  // The Vulkan minimums unless the device says more.
  uint32_t max_workgroup_invocations = 128, max_workgroup_size_x = 128;
  uint32_t max_shared_memory = 16384;  // bytes per workgroup
  uint64_t max_binding_bytes = uint64_t(1) << 27;
  uint32_t subgroup_size = 0;        // 0: unknown
  bool subgroup_arithmetic = false;  // subgroupAdd/Max in compute shaders
  bool byte_storage = false;         // 8-bit storage buffers (the block-format kernels' byte reads)
  // Attention a row per invocation (attention_rows.comp) instead of shared-memory tiles: a
  // CPU-emulated device runs a workgroup's invocations as SIMD lanes, where a lockstep load is
  // a broadcast and a tile load a gather.
  bool row_attention = false;
  // Invocations per workgroup (along x) the device allows.
  uint32_t max_workgroup() const { return std::min(max_workgroup_invocations, max_workgroup_size_x); }
};
// The class of `info`'s device, or of the class `kernel_class` names ("gpu", "cpu"; "" its own)
// with the device's limits and loop budget; `kernels` forces a GEMM family
// (VulkanOptions::kernels) and throws where the device cannot run it.
DeviceClass device_class(const VulkanDeviceInfo& info, const std::string& kernel_class = "",
                         VulkanOptions::Kernels kernels = VulkanOptions::Kernels::automatic);
inline DeviceClass device_class(const VulkanDeviceInfo& info, VulkanOptions::Kernels kernels) {
  return device_class(info, "", kernels);
}

// Lowers every dispatch; throws std::invalid_argument naming the op for a launch whose planned
// loop iterations exceed dc.loop_budget or whose workgroup exceeds the device's limits.
std::vector<Launch> lower_program(const Program& p, const DeviceClass& dc);
// The same launches without the checks (what a report of the plan shows).
std::vector<Launch> plan_launches(const Program& p, const DeviceClass& dc);

}  // namespace meganeura::vk
