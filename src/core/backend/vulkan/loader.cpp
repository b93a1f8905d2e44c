#include "backend/vulkan/loader.h"

#include <dlfcn.h>

#include <mutex>

namespace meganeura::vk {

// A table, not a switch: VkResult is open (drivers and newer headers add values).
const char* result_name(VkResult r) {
  static constexpr struct {
    VkResult value;
    const char* name;
  } kNames[] = {
      {VK_SUCCESS, "VK_SUCCESS"},
      {VK_NOT_READY, "VK_NOT_READY"},
      {VK_TIMEOUT, "VK_TIMEOUT"},
      {VK_INCOMPLETE, "VK_INCOMPLETE"},
      {VK_ERROR_OUT_OF_HOST_MEMORY, "VK_ERROR_OUT_OF_HOST_MEMORY"},
      {VK_ERROR_OUT_OF_DEVICE_MEMORY, "VK_ERROR_OUT_OF_DEVICE_MEMORY"},
      {VK_ERROR_INITIALIZATION_FAILED, "VK_ERROR_INITIALIZATION_FAILED"},
      {VK_ERROR_DEVICE_LOST, "VK_ERROR_DEVICE_LOST"},
      {VK_ERROR_MEMORY_MAP_FAILED, "VK_ERROR_MEMORY_MAP_FAILED"},
      {VK_ERROR_LAYER_NOT_PRESENT, "VK_ERROR_LAYER_NOT_PRESENT"},
      {VK_ERROR_EXTENSION_NOT_PRESENT, "VK_ERROR_EXTENSION_NOT_PRESENT"},
      {VK_ERROR_FEATURE_NOT_PRESENT, "VK_ERROR_FEATURE_NOT_PRESENT"},
      {VK_ERROR_INCOMPATIBLE_DRIVER, "VK_ERROR_INCOMPATIBLE_DRIVER"},
      {VK_ERROR_TOO_MANY_OBJECTS, "VK_ERROR_TOO_MANY_OBJECTS"},
      {VK_ERROR_FORMAT_NOT_SUPPORTED, "VK_ERROR_FORMAT_NOT_SUPPORTED"},
      {VK_ERROR_FRAGMENTED_POOL, "VK_ERROR_FRAGMENTED_POOL"},
      {VK_ERROR_OUT_OF_POOL_MEMORY, "VK_ERROR_OUT_OF_POOL_MEMORY"},
  };
  for (const auto& n : kNames)
    if (n.value == r) return n.name;
  return "VkResult";
}

void fail(VkResult r, const char* expr, const char* file, int line) {
  std::string where = file;
  if (auto p = where.rfind("/src/"); p != std::string::npos) where = where.substr(p + 1);
  throw std::runtime_error("[vulkan] " + std::string(expr) + " failed with " + result_name(r) + " (" +
                           std::to_string(int(r)) + ") at " + where + ":" + std::to_string(line));
}

namespace {

Api load_global() {
  Api api;
  void* lib = nullptr;
  for (const char* name : {"libvulkan.so.1", "libvulkan.so"}) {
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
  }
  if (!lib) {
    throw Unavailable("[vulkan] no Vulkan loader: libvulkan.so.1 could not be opened (" +
                      std::string(dlerror() ? dlerror() : "not found") + "); install libvulkan1");
  }
  api.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  if (!api.vkGetInstanceProcAddr) throw Unavailable("[vulkan] the loader has no vkGetInstanceProcAddr");
#define MEGANEURA_VK_LOAD(name) api.name = reinterpret_cast<PFN_##name>(api.vkGetInstanceProcAddr(nullptr, #name));
  MEGANEURA_VK_GLOBAL(MEGANEURA_VK_LOAD)
#undef MEGANEURA_VK_LOAD
  if (!api.vkCreateInstance) throw Unavailable("[vulkan] the loader has no vkCreateInstance");
  return api;
}

}  // namespace

const Api& global_api() {
  // The library stays open for the process: drivers keep threads and atexit handlers.
  static std::once_flag once;
  static Api api;
  static std::string error;
  std::call_once(once, [] {
    try {
      api = load_global();
    } catch (const Unavailable& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw Unavailable(error);
  return api;
}

void load_instance(Api& api, VkInstance instance) {
#define MEGANEURA_VK_LOAD(name) api.name = reinterpret_cast<PFN_##name>(api.vkGetInstanceProcAddr(instance, #name));
  MEGANEURA_VK_INSTANCE(MEGANEURA_VK_LOAD)
#undef MEGANEURA_VK_LOAD
}

void load_device(Api& api, VkDevice device) {
#define MEGANEURA_VK_LOAD(name)                                                    \
  api.name = reinterpret_cast<PFN_##name>(api.vkGetDeviceProcAddr(device, #name)); \
  if (!api.name) throw std::runtime_error("[vulkan] the device has no " #name);
  MEGANEURA_VK_DEVICE(MEGANEURA_VK_LOAD)
#undef MEGANEURA_VK_LOAD
}

}  // namespace meganeura::vk
