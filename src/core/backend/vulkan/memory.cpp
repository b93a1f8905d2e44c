#include "backend/vulkan/memory.h"

#include <memory>

namespace meganeura::vk {

Buffer::~Buffer() {
  if (!owned || !device) return;
  const Api& api = device->api;
  if (mapped) api.vkUnmapMemory(device->device, memory);
  if (buffer) api.vkDestroyBuffer(device->device, buffer, nullptr);
  if (memory) api.vkFreeMemory(device->device, memory, nullptr);
}

namespace {

std::string heap_text(const VkPhysicalDeviceMemoryProperties& m, uint32_t heap) {
  const VkMemoryHeap& h = m.memoryHeaps[heap];
  return "heap " + std::to_string(heap) + " (" +
         ((h.flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) ? "device-local, " : "host, ") + std::to_string(h.size) +
         " bytes)";
}

int find_type(const VkPhysicalDeviceMemoryProperties& m, uint32_t allowed, VkMemoryPropertyFlags want) {
  for (uint32_t i = 0; i < m.memoryTypeCount; ++i) {
    if ((allowed & (1u << i)) && (m.memoryTypes[i].propertyFlags & want) == want) return int(i);
  }
  return -1;
}

}  // namespace

std::unique_ptr<Buffer> allocate(const Device& d, uint64_t bytes, Residence r, const std::string& what) {
  auto b = std::make_unique<Buffer>();
  b->device = &d;
  b->bytes = bytes;
  const uint64_t size = std::max<uint64_t>((bytes + 3) / 4 * 4, 4);
  if (d.info.max_memory_allocation_size && size > d.info.max_memory_allocation_size) {
    throw std::runtime_error("[vulkan] " + what + " needs " + std::to_string(size) +
                             " bytes, more than the device's maximum allocation of " +
                             std::to_string(d.info.max_memory_allocation_size));
  }
  auto bi = make<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  bi.size = size;
  // Staging is also bound as storage: the fused programs' code is read from host memory.
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VK_CHECK(d.api.vkCreateBuffer(d.device, &bi, nullptr, &b->buffer));
  VkMemoryRequirements req{};
  d.api.vkGetBufferMemoryRequirements(d.device, b->buffer, &req);
  int type = -1;
  if (r == Residence::device) {
    type = find_type(d.memory, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  } else {
    // Cached host memory makes read-back fast; coherent avoids explicit flushes.
    type = find_type(d.memory, req.memoryTypeBits,
                     VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                         VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (type < 0)
      type = find_type(d.memory, req.memoryTypeBits,
                       VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
  }
  if (type < 0) throw std::runtime_error("[vulkan] no suitable memory type for " + what);
  const uint32_t heap = d.memory.memoryTypes[type].heapIndex;
  auto ai = make<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = uint32_t(type);
  VkResult res = d.api.vkAllocateMemory(d.device, &ai, nullptr, &b->memory);
  if (res != VK_SUCCESS) {
    throw std::runtime_error("[vulkan] allocating " + std::to_string(req.size) + " bytes for " + what + " on " +
                             heap_text(d.memory, heap) + " failed: " + result_name(res));
  }
  VK_CHECK(d.api.vkBindBufferMemory(d.device, b->buffer, b->memory, 0));
  if (r == Residence::staging) VK_CHECK(d.api.vkMapMemory(d.device, b->memory, 0, VK_WHOLE_SIZE, 0, &b->mapped));
  return b;
}

}  // namespace meganeura::vk
