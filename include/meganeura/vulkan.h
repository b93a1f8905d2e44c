// The Vulkan backend's extras beyond the Backend interface, for applications that run on Vulkan
// themselves: per-dispatch profiles, their own buffers as program buffers, the pipeline cache.
#pragma once

#include <string>
#include <vector>

#include "meganeura/backend.h"

namespace meganeura {

struct VulkanLaunchProfile {
  std::string kernel, op;
  uint32_t dispatch = 0;
  double ms = 0;                // summed over profiled runs
  double flops = 0, bytes = 0;  // per run
};

struct VulkanProgramProfile {
  std::vector<VulkanLaunchProfile> launches;
  uint64_t runs = 0;
  double step_ms = 0;                     // summed over runs, first to last timestamp
  uint64_t dispatches = 0, barriers = 0;  // per step
};

// nullptr when `b` is not a Vulkan backend or was created without profiling.
const VulkanProgramProfile* vulkan_profile(const Backend& b, size_t program);
// "loaded", "missing", "stale", "corrupt" or "disabled", and the file, for the pipeline cache.
std::string vulkan_cache_status(const Backend& b, std::string* path = nullptr);
// Pipelines created by this backend (one per kernel and specialisation).
size_t vulkan_pipeline_count(const Backend& b);
// Uses the application's VkBuffer (storage, transfer src/dst usage; at least `bytes`) as the
// external buffer `name` of programs added afterwards: no copy, no allocation.
void vulkan_bind_buffer(Backend& b, const std::string& name, void* vk_buffer, uint64_t bytes);

}  // namespace meganeura
