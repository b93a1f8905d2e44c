// The Vulkan loader, opened at run time (dlopen of libvulkan.so.1) so that a machine without it
// gets a clear message instead of a failed program start. Entry points are resolved by hand
// into one table: global ones first, then per instance and per device.
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace meganeura::vk {

// clang-format off
#define MEGANEURA_VK_GLOBAL(X) \
  X(vkCreateInstance) \
  X(vkEnumerateInstanceExtensionProperties) \
  X(vkEnumerateInstanceLayerProperties) \
  X(vkEnumerateInstanceVersion)

#define MEGANEURA_VK_INSTANCE(X) \
  X(vkDestroyInstance) \
  X(vkEnumeratePhysicalDevices) \
  X(vkGetPhysicalDeviceProperties) \
  X(vkGetPhysicalDeviceProperties2) \
  X(vkGetPhysicalDeviceFeatures2) \
  X(vkGetPhysicalDeviceMemoryProperties) \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties) \
  X(vkCreateDevice) \
  X(vkGetDeviceProcAddr) \
  X(vkCreateDebugUtilsMessengerEXT) \
  X(vkDestroyDebugUtilsMessengerEXT)

#define MEGANEURA_VK_DEVICE(X) \
  X(vkDestroyDevice) \
  X(vkGetDeviceQueue) \
  X(vkDeviceWaitIdle) \
  X(vkCreateBuffer) \
  X(vkDestroyBuffer) \
  X(vkGetBufferMemoryRequirements) \
  X(vkAllocateMemory) \
  X(vkFreeMemory) \
  X(vkBindBufferMemory) \
  X(vkMapMemory) \
  X(vkUnmapMemory) \
  X(vkCreateShaderModule) \
  X(vkDestroyShaderModule) \
  X(vkCreatePipelineCache) \
  X(vkDestroyPipelineCache) \
  X(vkGetPipelineCacheData) \
  X(vkCreateComputePipelines) \
  X(vkDestroyPipeline) \
  X(vkCreatePipelineLayout) \
  X(vkDestroyPipelineLayout) \
  X(vkCreateDescriptorSetLayout) \
  X(vkDestroyDescriptorSetLayout) \
  X(vkCreateDescriptorPool) \
  X(vkDestroyDescriptorPool) \
  X(vkAllocateDescriptorSets) \
  X(vkUpdateDescriptorSets) \
  X(vkCreateCommandPool) \
  X(vkDestroyCommandPool) \
  X(vkAllocateCommandBuffers) \
  X(vkFreeCommandBuffers) \
  X(vkBeginCommandBuffer) \
  X(vkEndCommandBuffer) \
  X(vkCmdBindPipeline) \
  X(vkCmdBindDescriptorSets) \
  X(vkCmdPushConstants) \
  X(vkCmdDispatch) \
  X(vkCmdPipelineBarrier) \
  X(vkCmdCopyBuffer) \
  X(vkCmdCopyImageToBuffer) \
  X(vkCmdCopyBufferToImage) \
  X(vkCmdFillBuffer) \
  X(vkCmdResetQueryPool) \
  X(vkCmdWriteTimestamp) \
  X(vkCreateQueryPool) \
  X(vkDestroyQueryPool) \
  X(vkGetQueryPoolResults) \
  X(vkQueueSubmit) \
  X(vkQueueWaitIdle) \
  X(vkCreateFence) \
  X(vkDestroyFence) \
  X(vkWaitForFences) \
  X(vkGetFenceStatus) \
  X(vkResetFences)
// clang-format on

struct Api {
#define MEGANEURA_VK_FIELD(name) PFN_##name name = nullptr;
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  MEGANEURA_VK_GLOBAL(MEGANEURA_VK_FIELD)
  MEGANEURA_VK_INSTANCE(MEGANEURA_VK_FIELD)
  MEGANEURA_VK_DEVICE(MEGANEURA_VK_FIELD)
#undef MEGANEURA_VK_FIELD
};

// The process-wide loader; throws vk::Unavailable naming what is missing.
struct Unavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};
const Api& global_api();
void load_instance(Api& api, VkInstance instance);
void load_device(Api& api, VkDevice device);

// A Vulkan struct, zeroed, with its sType set.
template <class T>
T make(VkStructureType type) {
  T v{};
  v.sType = type;
  return v;
}

// Throws std::runtime_error("[vulkan] <expr> failed with <result> at file:line").
[[noreturn]] void fail(VkResult r, const char* expr, const char* file, int line);
const char* result_name(VkResult r);

}  // namespace meganeura::vk

#define VK_CHECK(expr)                                                                            \
  do {                                                                                            \
    VkResult vk_check_result_ = (expr);                                                           \
    if (vk_check_result_ < 0) ::meganeura::vk::fail(vk_check_result_, #expr, __FILE__, __LINE__); \
  } while (0)
