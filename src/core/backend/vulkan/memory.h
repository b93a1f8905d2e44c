// Buffers: device-local storage for tensors, host-visible staging for what the user reads and
// writes. Allocation failure names the bytes, the purpose and the heap.
#pragma once

#include <cstdint>
#include <string>

#include "backend/vulkan/context.h"

namespace meganeura::vk {

struct Buffer {
  const Device* device = nullptr;
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  uint64_t bytes = 0;      // requested size
  void* mapped = nullptr;  // host-visible buffers stay mapped
  bool owned = true;       // an application's buffer is only borrowed

  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();
};

enum class Residence { device, staging };
// Allocates `bytes` (at least 4) for `what` ("arena of program 0", "parameter 'w'").
std::unique_ptr<Buffer> allocate(const Device& d, uint64_t bytes, Residence r, const std::string& what);

}  // namespace meganeura::vk
