// The Vulkan backend's extras beyond the Backend interface, for applications that run on Vulkan
// themselves: per-dispatch profiles, their own buffers as program buffers, the pipeline cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meganeura/backend.h"

namespace meganeura {

class Session;

struct VulkanLaunchProfile {
  std::string kernel, op;
  uint32_t dispatch = 0;
  double ms = 0;                // summed over profiled runs
  double flops = 0, bytes = 0;  // per run
  uint64_t weight_bytes = 0;    // per run: parameters read, as stored (Program::weight_bytes)
  // The precision of the dispatch's operands: "f16" or "bf16" where it reads operands stored in
  // 16 bits (an accelerated contract's products), otherwise "f32".
  std::string operands = "f32";
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

// An application's VkImage as a program's input or output, copied at every run: an input's
// image into the tensor before the run's first kernel, an output's tensor into its image after
// the last. The tensor is f32 with width * height * channels elements, row-major [height,
// width, channels] (any shape of that size, e.g. [1, H, W, C]); the format gives the channels:
// VK_FORMAT_R32_SFLOAT (1), R32G32_SFLOAT (2) or R32G32B32A32_SFLOAT (4). The image is 2D,
// one mip level and layer, with TRANSFER_SRC usage (input) or TRANSFER_DST usage (output).
// Layouts: the run expects the image in `layout` when its first chunk starts (an output may say
// VK_IMAGE_LAYOUT_UNDEFINED: its contents are discarded) and leaves it in `final_layout`
// (e.g. SHADER_READ_ONLY_OPTIMAL for sampling, GENERAL for storage); in between it is in
// TRANSFER_SRC_OPTIMAL / TRANSFER_DST_OPTIMAL. The copies' barriers wait for and are waited for
// by all commands, so queue order or a semaphore is all the synchronisation the application needs.
struct VulkanImage {
  uint64_t image = 0;  // VkImage's handle value
  uint32_t format = 0;
  uint32_t width = 0, height = 0;
  uint32_t layout = 0, final_layout = 0;  // VkImageLayout
};
// Binds `image` to the external tensor `name` of programs added afterwards (throws
// std::invalid_argument when a program's tensor of that name is not an f32 input or output of
// the image's size, naming both).
void vulkan_bind_image(Backend& b, const std::string& name, const VulkanImage& image);

// ---- runs that do not block: sharing the queue with an application's rendering ----

// One of the application's semaphores (a VkSemaphore's 64-bit handle value). A wait holds the
// first submitted chunk's `stages` (VkPipelineStageFlags; default: all) until the
// semaphore is signalled; a signal fires when the last submitted chunk's work is done, with
// the memory of everything the run wrote available to later work. `value` is the timeline
// value (a timeline semaphore, which needs the device's timelineSemaphore feature); 0 means
// a binary semaphore.
struct VulkanSemaphore {
  uint64_t semaphore = 0;
  uint64_t value = 0;
  uint32_t stages = 0x10000;  // VK_PIPELINE_STAGE_ALL_COMMANDS_BIT
};

// What one vulkan_submit call queues: chunks [first_chunk, first_chunk + chunk_count) of a
// run (VulkanOptions::chunks splits a run; chunk_count 0: through the last), waiting on
// `wait` first and signalling `signal` after.
struct VulkanSubmit {
  size_t first_chunk = 0;
  size_t chunk_count = 0;
  std::vector<VulkanSemaphore> wait, signal;
};

// Queues (part of) a run of `program` on the session's queue and returns without waiting for
// it. A run's chunks are submitted in order, from chunk 0, by one call or several, with the
// application's own submissions to the queue in between (a frame's rendering, say); nothing
// else of the session (run, get, set, adding programs) may happen while a run is partly
// submitted (std::logic_error naming the program and the next chunk). Once its last chunk is
// queued, the run is pending: vulkan_run_done() tells without blocking whether it has
// finished, and the session's next call that reads, writes or runs waits for it first (as does
// vulkan_wait). Throws std::invalid_argument on a session that does not run on Vulkan or a
// chunk range outside the program's.
void vulkan_submit(Session& s, size_t program, const VulkanSubmit& submit);
// The number of chunks a run of `program` is submitted in.
size_t vulkan_chunk_count(const Backend& b, size_t program);
// True when no submitted run is still executing (never blocks).
bool vulkan_run_done(const Backend& b);
// Blocks until the last submitted run has finished (the queue is not waited idle: the
// application's own work on it is not waited for).
void vulkan_wait(Backend& b);

}  // namespace meganeura
