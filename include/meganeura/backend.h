// A backend owns device memory and executes Programs. Programs added to one backend share their
// external buffers by name (a training program and an optimizer-apply program see the same
// parameters); each program has its own arena for temporaries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "meganeura/passes.h"
#include "meganeura/program.h"

namespace meganeura {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string device_name() const = 0;
  // What the planner must respect: binding range, allocation size, offset alignment.
  virtual DeviceLimits limits() const = 0;
  // Validates and prepares `p`; allocates its arena and any external buffer not yet present.
  // Returns the program's index for run().
  virtual size_t add_program(const Program& p) = 0;
  virtual void write(const std::string& buffer, const void* data, size_t bytes) = 0;
  virtual void read(const std::string& buffer, void* data, size_t bytes) const = 0;
  virtual void run(size_t program) = 0;
  // Runs `program` and calls `reached(k)` once dispatch `marks[k]` (non-decreasing) and every
  // dispatch before it have completed: between dispatches where the backend can stop there
  // (CPU), so the caller overlaps work with the rest of the run; otherwise after the run.
  virtual void run_marked(size_t program, std::span<const uint32_t> marks, const std::function<void(size_t)>& reached) {
    run(program);
    for (size_t k = 0; k < marks.size(); ++k) reached(k);
  }
  // The rewrite passes whose fused ops this backend has kernels for; Session::add(const Graph&)
  // runs only these.
  virtual PassOptions passes() const { return {}; }
  // Whether its product kernels read operands stored in 16 bits (PlanOptions::half_operands).
  virtual bool half_operands() const { return false; }
  // Whether its kernels read parameters stored in 16 bits (PlanOptions::weights_dtype).
  virtual bool half_weights() const { return half_operands(); }

  // Counters of the work behind run(): what a test or a profile inspects.
  struct Stats {
    uint64_t recordings = 0;   // command buffers recorded since creation
    uint64_t submissions = 0;  // queue submissions since creation
    uint64_t dispatches = 0;   // per run of the last program run
    uint64_t barriers = 0;     // per run of the last program run
  };
  virtual Stats stats() const { return {}; }
};

struct CpuOptions {
  int threads = 0;  // 0: all cores
};
std::unique_ptr<Backend> make_cpu_backend(const CpuOptions& options = {});

// ---- Vulkan -----
struct VulkanHeap {
  uint64_t bytes = 0;
  bool device_local = false;
};

// What `meganeura devices` reports for one physical device.
struct VulkanDeviceInfo {
  int index = 0;
  std::string name, vendor, driver, type;  // type: discrete, integrated, virtual, cpu, other
  uint32_t vendor_id = 0, device_id = 0, api_version = 0;
  std::string api;  // "1.3.239"
  std::vector<VulkanHeap> heaps;
  uint32_t subgroup_size = 0;
  bool subgroup_arithmetic = false;
  bool f16 = false, bf16 = false, int8 = false, cooperative_matrix = false;
  // storageBuffer8BitAccess: shaders may read storage buffers byte by byte (the block-format
  // kernels then do; enabled on the devices the backend creates, not on an application's).
  bool storage8 = false;
  bool portability_subset = false;
  uint64_t max_storage_buffer_range = 0, min_storage_buffer_offset_alignment = 0;
  uint64_t max_memory_allocation_size = 0;
  uint32_t max_workgroup_invocations = 0, max_workgroup_count[3] = {0, 0, 0}, max_workgroup_size[3] = {0, 0, 0};
  uint32_t max_shared_memory = 0, max_push_constants = 0;
  uint32_t max_storage_buffers_per_stage = 0;
  double timestamp_period_ns = 0;
};

// Lists the Vulkan devices; throws std::runtime_error with a clear message when there is no
// loader (the message names what is missing).
std::vector<VulkanDeviceInfo> vulkan_devices();

// An application's own instance, device and queue; the backend borrows them.
struct VulkanExternalDevice {
  void* instance = nullptr;         // VkInstance
  void* physical_device = nullptr;  // VkPhysicalDevice
  void* device = nullptr;           // VkDevice
  void* queue = nullptr;            // VkQueue (compute-capable)
  uint32_t queue_family = 0;
  void* get_instance_proc_addr = nullptr;  // PFN_vkGetInstanceProcAddr; null: the loader's
};

struct VulkanOptions {
  // "" or "vulkan": the best device of any type; otherwise an index or a name substring.
  std::string device;
  // Enable VK_LAYER_KHRONOS_validation; any message it reports makes the next call throw.
  bool validation = false;
  // Persist pipelines under $XDG_CACHE_HOME/meganeura/ (or ~/.cache/meganeura/).
  bool pipeline_cache = true;
  std::string cache_dir;  // overrides the directory
  // Time every dispatch with timestamp queries (read back by vulkan_profile()).
  bool profile = false;
  // Split one run's submission into this many command buffers (sharing a queue with rendering).
  int chunks = 1;
  // The kernel choices (tiles, workgroup sizes, the attention kernel) of a class of device other
  // than the device's own: "" (its own), "gpu" or "cpu". The loop budget stays the device's.
  std::string kernel_class;
  const VulkanExternalDevice* external = nullptr;
  // The GEMM and convolution kernels: chosen by the device's type (automatic: shared-memory
  // tiles on GPUs, direct register blocks on CPU-emulated devices) or forced, so that tests run
  // both families on any device and benchmarks compare them with the first GEMM kernel
  // (naive: matmul only; convolutions then take the shared-memory tiles).
  enum class Kernels : uint8_t { automatic, shared_memory, direct, naive };
  Kernels kernels = Kernels::automatic;
  // Block-format weights read through 8-bit storage where the device has it (false: unpacked
  // from 32-bit words everywhere, to compare the two).
  bool byte_storage = true;
};
std::unique_ptr<Backend> make_vulkan_backend(const VulkanOptions& options = {});

// How the Vulkan backend lowers a program for a device, planned without the device: each
// dispatch's kernel launches with the loop back-edges one invocation of each runs at most (all
// its loops together). The backend refuses, when the program is added, a launch planned above
// the device's loop budget: 32,768 on CPU-emulated devices (lavapipe leaves every loop of an
// invocation silently after 65,535), 2^24 elsewhere.
struct VulkanLaunchPlan {
  std::string kernel;
  uint64_t loop_iterations = 0;
  uint32_t workgroup = 1;  // invocations per workgroup
  uint32_t groups[3] = {1, 1, 1};
  uint64_t shared_memory_bytes = 0;  // per workgroup
};
struct VulkanProgramPlan {
  std::string device;
  uint64_t loop_budget = 0;
  std::vector<std::vector<VulkanLaunchPlan>> dispatches;  // per dispatch of the program
};
// Throws std::invalid_argument naming the op for a dispatch the backend has no kernel for;
// launches over the budget are reported, not refused.
VulkanProgramPlan plan_vulkan_program(const Program& p, const VulkanDeviceInfo& device);
// What lavapipe (Mesa 22.3's llvmpipe, 256-bit, as Debian 12 ships it) reports: the device CI
// runs on, to plan for without it.
VulkanDeviceInfo lavapipe_device_info();

// Whether a Vulkan device that `auto` would choose (discrete or integrated) exists, and a
// sentence saying what was found otherwise.
bool vulkan_gpu_available(std::string* why);

}  // namespace meganeura
