// A session inside someone else's renderer: the application creates the instance, device,
// queue and buffers (host-visible here, so it can fill and check them by mapping); the backend
// borrows them, binds the application's buffers as the program's input and output without
// copies, and splits the step into chunks. Validation is on through the application's own
// messenger; any message fails the test.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/vulkan/loader.h"
#include "meganeura/program.h"
#include "meganeura/vulkan.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

using vk::make;

int messages = 0;
VKAPI_ATTR VkBool32 VKAPI_CALL count_message(VkDebugUtilsMessageSeverityFlagBitsEXT, VkDebugUtilsMessageTypeFlagsEXT,
                                             const VkDebugUtilsMessengerCallbackDataEXT* d, void*) {
  ++messages;
  ADD_FAILURE() << "validation: " << (d && d->pMessage ? d->pMessage : "");
  return VK_FALSE;
}

struct AppBuffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  float* data = nullptr;
};

TEST(VulkanAppDevice, BorrowedDeviceAndBuffersWithoutCopies) {
  MEGANEURA_REQUIRE_VULKAN();
  vk::Api api = vk::global_api();
  auto dm = make<VkDebugUtilsMessengerCreateInfoEXT>(VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
  dm.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  dm.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
  dm.pfnUserCallback = count_message;
  auto app = make<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.apiVersion = VK_API_VERSION_1_1;
  const char* layer = "VK_LAYER_KHRONOS_validation";
  const char* exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME, "VK_KHR_portability_enumeration"};
  auto ici = make<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  ici.pNext = &dm;
  ici.flags = VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  ici.pApplicationInfo = &app;
  ici.enabledLayerCount = 1;
  ici.ppEnabledLayerNames = &layer;
  ici.enabledExtensionCount = 2;
  ici.ppEnabledExtensionNames = exts;
  VkInstance instance;
  ASSERT_EQ(api.vkCreateInstance(&ici, nullptr, &instance), VK_SUCCESS);
  vk::load_instance(api, instance);
  VkDebugUtilsMessengerEXT messenger;
  ASSERT_EQ(api.vkCreateDebugUtilsMessengerEXT(instance, &dm, nullptr, &messenger), VK_SUCCESS);
  uint32_t n = 1;
  VkPhysicalDevice pd;
  ASSERT_NE(api.vkEnumeratePhysicalDevices(instance, &n, &pd), VK_ERROR_INITIALIZATION_FAILED);
  uint32_t qn = 0;
  api.vkGetPhysicalDeviceQueueFamilyProperties(pd, &qn, nullptr);
  std::vector<VkQueueFamilyProperties> qf(qn);
  api.vkGetPhysicalDeviceQueueFamilyProperties(pd, &qn, qf.data());
  uint32_t family = 0;
  while (family < qn && !(qf[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++family;
  ASSERT_LT(family, qn);
  float priority = 1;
  auto qci = make<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  qci.queueFamilyIndex = family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  auto dci = make<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  VkDevice device;
  ASSERT_EQ(api.vkCreateDevice(pd, &dci, nullptr, &device), VK_SUCCESS);
  vk::load_device(api, device);
  VkQueue queue;
  api.vkGetDeviceQueue(device, family, 0, &queue);

  VkPhysicalDeviceMemoryProperties mp;
  api.vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  const uint32_t count = 1000;
  auto make_buffer = [&]() {
    AppBuffer b;
    auto bi = make<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
    bi.size = count * 4;
    bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    EXPECT_EQ(api.vkCreateBuffer(device, &bi, nullptr, &b.buffer), VK_SUCCESS);
    VkMemoryRequirements req;
    api.vkGetBufferMemoryRequirements(device, b.buffer, &req);
    uint32_t type = 0;
    const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    while (!((req.memoryTypeBits >> type) & 1) || (mp.memoryTypes[type].propertyFlags & want) != want) ++type;
    auto ai = make<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = type;
    EXPECT_EQ(api.vkAllocateMemory(device, &ai, nullptr, &b.memory), VK_SUCCESS);
    EXPECT_EQ(api.vkBindBufferMemory(device, b.buffer, b.memory, 0), VK_SUCCESS);
    void* p;
    EXPECT_EQ(api.vkMapMemory(device, b.memory, 0, VK_WHOLE_SIZE, 0, &p), VK_SUCCESS);
    b.data = static_cast<float*>(p);
    return b;
  };
  AppBuffer in = make_buffer(), out = make_buffer();
  for (uint32_t i = 0; i < count; ++i) in.data[i] = float(i) - 500.0f;
  {
    VulkanExternalDevice ext;
    ext.instance = instance;
    ext.physical_device = pd;
    ext.device = device;
    ext.queue = queue;
    ext.queue_family = family;
    VulkanOptions o;
    o.external = &ext;
    o.pipeline_cache = false;
    o.chunks = 3;
    auto b = make_vulkan_backend(o);
    vulkan_bind_buffer(*b, "x", in.buffer, count * 4);
    vulkan_bind_buffer(*b, "y", out.buffer, count * 4);
    Graph g;
    Tensor x = g.input("x", {int64_t(count)});
    g.output("y", affine(relu(x), 2.0, 1.0) * x);
    b->add_program(plan(g));
    b->run(0);
    // The application's own memory holds the result: no copy went through staging.
    for (uint32_t i = 0; i < count; ++i) {
      const float v = in.data[i];
      ASSERT_EQ(out.data[i], (2.0f * std::max(v, 0.0f) + 1.0f) * v) << i;
    }
    // The application changes the input in place; the next step sees it.
    for (uint32_t i = 0; i < count; ++i) in.data[i] = 1.0f;
    b->run(0);
    EXPECT_EQ(out.data[7], 3.0f);
    EXPECT_EQ(b->stats().submissions, 2u * 3u + 1u) << "three chunks per step, plus the arena's zero fill";
  }
  // The device, queue and buffers are still the application's, and usable.
  EXPECT_EQ(api.vkDeviceWaitIdle(device), VK_SUCCESS);
  for (AppBuffer* b : {&in, &out}) {
    api.vkDestroyBuffer(device, b->buffer, nullptr);
    api.vkFreeMemory(device, b->memory, nullptr);
  }
  api.vkDestroyDevice(device, nullptr);
  api.vkDestroyDebugUtilsMessengerEXT(instance, messenger, nullptr);
  api.vkDestroyInstance(instance, nullptr);
  EXPECT_EQ(messages, 0);
}

}  // namespace
}  // namespace meganeura
