#include "backend/vulkan/context.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace meganeura::vk {
namespace {

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                          VkDebugUtilsMessageTypeFlagsEXT,
                                          const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
    static_cast<Instance*>(user)->record_message(data && data->pMessage ? data->pMessage : "(no text)");
  }
  return VK_FALSE;
}

bool has_extension(const std::vector<VkExtensionProperties>& list, const char* name) {
  return std::any_of(list.begin(), list.end(),
                     [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

std::string version_string(uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
         std::to_string(VK_API_VERSION_PATCH(v));
}

std::string vendor_name(uint32_t id) {
  switch (id) {
    case 0x10de: return "NVIDIA";
    case 0x1002: return "AMD";
    case 0x8086: return "Intel";
    case 0x13b5: return "ARM";
    case 0x5143: return "Qualcomm";
    case 0x106b: return "Apple";
    case 0x10005: return "Mesa";
    default: {
      char buf[16];
      std::snprintf(buf, sizeof buf, "0x%04x", id);
      return buf;
    }
  }
}

std::string type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    case VK_PHYSICAL_DEVICE_TYPE_OTHER:
    case VK_PHYSICAL_DEVICE_TYPE_MAX_ENUM: break;
  }
  return "other";  // also any value a newer driver reports
}

int type_rank(const std::string& t) {
  if (t == "discrete") return 0;
  if (t == "integrated") return 1;
  if (t == "virtual") return 2;
  if (t == "cpu") return 3;
  return 4;
}

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Instance::Instance(bool validation) {
  const Api& g = global_api();
  api_ = g;
  uint32_t version = VK_API_VERSION_1_0;
  if (api_.vkEnumerateInstanceVersion) api_.vkEnumerateInstanceVersion(&version);
  if (version < VK_API_VERSION_1_1) {
    throw Unavailable("[vulkan] the loader supports Vulkan " + version_string(version) + "; 1.1 or newer is needed");
  }
  uint32_t n = 0;
  VK_CHECK(api_.vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr));
  std::vector<VkExtensionProperties> exts(n);
  VK_CHECK(api_.vkEnumerateInstanceExtensionProperties(nullptr, &n, exts.data()));
  std::vector<const char*> enabled;
  // Portability enumeration lists MoltenVK-style devices that only implement a subset.
  portability_ = has_extension(exts, "VK_KHR_portability_enumeration");
  if (portability_) enabled.push_back("VK_KHR_portability_enumeration");
  std::vector<const char*> layers;
  if (validation) {
    uint32_t ln = 0;
    VK_CHECK(api_.vkEnumerateInstanceLayerProperties(&ln, nullptr));
    std::vector<VkLayerProperties> lp(ln);
    VK_CHECK(api_.vkEnumerateInstanceLayerProperties(&ln, lp.data()));
    bool found = std::any_of(lp.begin(), lp.end(), [](const VkLayerProperties& l) {
      return std::strcmp(l.layerName, "VK_LAYER_KHRONOS_validation") == 0;
    });
    if (!found)
      throw std::runtime_error(
          "[vulkan] validation requested but VK_LAYER_KHRONOS_validation is not installed (vulkan-validationlayers)");
    if (!has_extension(exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME))
      throw std::runtime_error("[vulkan] validation requested but VK_EXT_debug_utils is missing");
    layers.push_back("VK_LAYER_KHRONOS_validation");
    enabled.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  }
  auto app = make<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.pApplicationName = "meganeura";
  app.pEngineName = "meganeura";
  app.apiVersion = std::min<uint32_t>(version, VK_API_VERSION_1_3);
  auto dm = make<VkDebugUtilsMessengerCreateInfoEXT>(VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
  dm.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  dm.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                   VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  dm.pfnUserCallback = on_message;
  dm.pUserData = this;
  auto ci = make<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  ci.pNext = validation ? &dm : nullptr;  // also covers instance creation itself
  ci.flags = portability_ ? VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR : 0;
  ci.pApplicationInfo = &app;
  ci.enabledExtensionCount = uint32_t(enabled.size());
  ci.ppEnabledExtensionNames = enabled.data();
  ci.enabledLayerCount = uint32_t(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  VkResult created = api_.vkCreateInstance(&ci, nullptr, &instance_);
  if (created == VK_ERROR_INCOMPATIBLE_DRIVER) {
    throw Unavailable(
        "[vulkan] no Vulkan driver: the loader found none for this machine (VK_ERROR_INCOMPATIBLE_DRIVER)");
  }
  if (created == VK_ERROR_LAYER_NOT_PRESENT) {
    throw std::runtime_error(
        "[vulkan] the validation layer's manifest was found but its library could not be loaded "
        "(VK_ERROR_LAYER_NOT_PRESENT); VK_LOADER_DEBUG=layer says why");
  }
  if (created < 0) vk::fail(created, "vkCreateInstance", __FILE__, __LINE__);
  load_instance(api_, instance_);
  if (validation) VK_CHECK(api_.vkCreateDebugUtilsMessengerEXT(instance_, &dm, nullptr, &messenger_));
}

Instance::Instance(VkInstance borrowed, PFN_vkGetInstanceProcAddr gipa) : instance_(borrowed), owned_(false) {
  if (gipa)
    api_.vkGetInstanceProcAddr = gipa;
  else
    api_ = global_api();
  load_instance(api_, instance_);
}

Instance::~Instance() {
  if (messenger_) api_.vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
  if (owned_ && instance_) api_.vkDestroyInstance(instance_, nullptr);
}

void Instance::record_message(std::string m) {
  std::lock_guard lock(mutex_);
  messages_.push_back(std::move(m));
}

std::vector<std::string> Instance::take_messages() {
  std::lock_guard lock(mutex_);
  return std::exchange(messages_, {});
}

std::vector<VkPhysicalDevice> Instance::physical_devices() const {
  uint32_t n = 0;
  VK_CHECK(api_.vkEnumeratePhysicalDevices(instance_, &n, nullptr));
  std::vector<VkPhysicalDevice> v(n);
  if (n) VK_CHECK(api_.vkEnumeratePhysicalDevices(instance_, &n, v.data()));
  v.resize(n);
  return v;
}

VulkanDeviceInfo Instance::describe(VkPhysicalDevice pd, int index) const {
  VulkanDeviceInfo info;
  info.index = index;
  auto driver = make<VkPhysicalDeviceDriverProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES);
  auto sub = make<VkPhysicalDeviceSubgroupProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
  auto m3 = make<VkPhysicalDeviceMaintenance3Properties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
  auto p2 = make<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  sub.pNext = &m3;
  p2.pNext = &sub;
  VkPhysicalDeviceProperties base{};
  api_.vkGetPhysicalDeviceProperties(pd, &base);
  const bool v12 = base.apiVersion >= VK_API_VERSION_1_2;
  if (v12) m3.pNext = &driver;
  api_.vkGetPhysicalDeviceProperties2(pd, &p2);
  const VkPhysicalDeviceProperties& p = p2.properties;
  info.name = p.deviceName;
  info.vendor_id = p.vendorID;
  info.device_id = p.deviceID;
  info.vendor = vendor_name(p.vendorID);
  info.type = type_name(p.deviceType);
  info.api_version = p.apiVersion;
  info.api = version_string(p.apiVersion);
  info.driver =
      v12 ? std::string(driver.driverName) + " " + driver.driverInfo : "driver " + std::to_string(p.driverVersion);
  info.subgroup_size = sub.subgroupSize;
  info.subgroup_arithmetic = (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                             (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT);
  info.max_storage_buffer_range = p.limits.maxStorageBufferRange;
  info.min_storage_buffer_offset_alignment = p.limits.minStorageBufferOffsetAlignment;
  info.max_memory_allocation_size = m3.maxMemoryAllocationSize;
  info.max_workgroup_invocations = p.limits.maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; ++i) info.max_workgroup_count[i] = p.limits.maxComputeWorkGroupCount[i];
  for (int i = 0; i < 3; ++i) info.max_workgroup_size[i] = p.limits.maxComputeWorkGroupSize[i];
  info.max_shared_memory = p.limits.maxComputeSharedMemorySize;
  info.max_push_constants = p.limits.maxPushConstantsSize;
  info.max_storage_buffers_per_stage = p.limits.maxPerStageDescriptorStorageBuffers;
  info.timestamp_period_ns = p.limits.timestampPeriod;

  uint32_t n = 0;
  VK_CHECK(api_.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr));
  std::vector<VkExtensionProperties> exts(n);
  VK_CHECK(api_.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data()));
  info.portability_subset = has_extension(exts, "VK_KHR_portability_subset");
  info.cooperative_matrix =
      has_extension(exts, "VK_KHR_cooperative_matrix") || has_extension(exts, "VK_NV_cooperative_matrix");
  info.bf16 = has_extension(exts, "VK_KHR_shader_bfloat16");
  if (v12) {
    auto f12 = make<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
    auto f2 = make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
    f2.pNext = &f12;
    api_.vkGetPhysicalDeviceFeatures2(pd, &f2);
    info.f16 = f12.shaderFloat16;
    info.int8 = f12.shaderInt8;
    info.storage8 = f12.storageBuffer8BitAccess;
  }
  VkPhysicalDeviceMemoryProperties mem{};
  api_.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  for (uint32_t i = 0; i < mem.memoryHeapCount; ++i) {
    info.heaps.push_back({mem.memoryHeaps[i].size, bool(mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)});
  }
  return info;
}

Device::~Device() {
  if (owned && device) api.vkDestroyDevice(device, nullptr);
}

namespace {

uint32_t compute_family(const Api& api, VkPhysicalDevice pd) {
  uint32_t n = 0;
  api.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> q(n);
  api.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, q.data());
  // Prefer a compute queue without graphics (async compute), else any compute queue.
  for (uint32_t i = 0; i < n; ++i) {
    if ((q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) return i;
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return i;
  }
  throw std::runtime_error("[vulkan] the device has no compute queue");
}

bool family_has_timestamps(const Api& api, VkPhysicalDevice pd, uint32_t family) {
  uint32_t n = 0;
  api.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> q(n);
  api.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, q.data());
  return family < n && q[family].timestampValidBits > 0;
}

void finish(Device& d) {
  load_device(d.api, d.device);
  d.instance->api().vkGetPhysicalDeviceMemoryProperties(d.physical, &d.memory);
  d.timestamps = family_has_timestamps(d.api, d.physical, d.queue_family) && d.info.timestamp_period_ns > 0;
}

}  // namespace

std::unique_ptr<Device> open_device(std::shared_ptr<Instance> instance, const std::string& spec) {
  auto pds = instance->physical_devices();
  std::vector<VulkanDeviceInfo> infos;
  for (size_t i = 0; i < pds.size(); ++i) infos.push_back(instance->describe(pds[i], int(i)));
  if (infos.empty())
    throw Unavailable("[vulkan] the loader found no Vulkan device (no driver installed for this machine's GPU?)");
  int chosen = -1;
  if (spec.empty() || spec == "vulkan" || spec == "gpu") {
    for (size_t i = 0; i < infos.size(); ++i) {
      if (infos[i].api_version < VK_API_VERSION_1_1) continue;
      if (chosen < 0 || type_rank(infos[i].type) < type_rank(infos[size_t(chosen)].type)) chosen = int(i);
    }
    if (spec == "gpu" && chosen >= 0 && type_rank(infos[size_t(chosen)].type) > 1) return nullptr;
  } else {
    bool numeric =
        std::all_of(spec.begin(), spec.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    for (size_t i = 0; i < infos.size() && chosen < 0; ++i) {
      if (numeric ? std::to_string(i) == spec : lower(infos[i].name).find(lower(spec)) != std::string::npos)
        chosen = int(i);
    }
  }
  if (chosen < 0) {
    std::string list;
    for (auto& i : infos)
      list += (list.empty() ? "" : ", ") + std::to_string(i.index) + ": " + i.name + " (" + i.type + ")";
    throw std::invalid_argument("[vulkan] no Vulkan device matches '" + spec + "' (devices: " + list + ")");
  }
  auto d = std::make_unique<Device>();
  d->instance = instance;
  d->api = instance->api();
  d->physical = pds[size_t(chosen)];
  d->info = infos[size_t(chosen)];
  if (d->info.api_version < VK_API_VERSION_1_1)
    throw std::runtime_error("[vulkan] " + d->info.name + " supports only Vulkan " + d->info.api);
  d->queue_family = compute_family(d->api, d->physical);
  float priority = 1.0f;
  auto q = make<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  q.queueFamilyIndex = d->queue_family;
  q.queueCount = 1;
  q.pQueuePriorities = &priority;
  std::vector<const char*> exts;
  // A portability-subset device must have the extension enabled; we use nothing it forbids.
  if (d->info.portability_subset) exts.push_back("VK_KHR_portability_subset");
  auto ci = make<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  // 8-bit storage (core in 1.2) for the block-format kernels' byte reads, where there is one.
  auto f12 = make<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  f12.storageBuffer8BitAccess = VK_TRUE;
  if (d->info.storage8) ci.pNext = &f12;
  ci.queueCreateInfoCount = 1;
  ci.pQueueCreateInfos = &q;
  ci.enabledExtensionCount = uint32_t(exts.size());
  ci.ppEnabledExtensionNames = exts.data();
  VK_CHECK(d->api.vkCreateDevice(d->physical, &ci, nullptr, &d->device));
  finish(*d);
  d->api.vkGetDeviceQueue(d->device, d->queue_family, 0, &d->queue);
  return d;
}

std::unique_ptr<Device> adopt_device(std::shared_ptr<Instance> instance, const VulkanExternalDevice& e) {
  if (!e.physical_device || !e.device || !e.queue)
    throw std::invalid_argument("[vulkan] an application device needs its physical device, device and queue");
  auto d = std::make_unique<Device>();
  d->instance = instance;
  d->api = instance->api();
  d->physical = static_cast<VkPhysicalDevice>(e.physical_device);
  d->device = static_cast<VkDevice>(e.device);
  d->queue = static_cast<VkQueue>(e.queue);
  d->queue_family = e.queue_family;
  d->owned = false;
  d->info = instance->describe(d->physical, 0);
  d->info.storage8 = false;  // the application may not have enabled it
  finish(*d);
  return d;
}

}  // namespace meganeura::vk
