// Instance and device: enumeration with what `meganeura devices` reports, selection by name or
// class, and the logical device with one compute queue. Either owned here or borrowed from an
// application (its VkInstance/VkDevice/queue stay its own).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/vulkan/loader.h"
#include "meganeura/backend.h"

namespace meganeura::vk {

class Instance {
 public:
  // validation: enable VK_LAYER_KHRONOS_validation with a messenger that records every message.
  explicit Instance(bool validation);
  // Borrowed: the application's instance; nothing is destroyed here.
  Instance(VkInstance borrowed, PFN_vkGetInstanceProcAddr gipa);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  const Api& api() const { return api_; }
  Api& api() { return api_; }
  VkInstance handle() const { return instance_; }
  std::vector<VkPhysicalDevice> physical_devices() const;
  VulkanDeviceInfo describe(VkPhysicalDevice pd, int index) const;
  bool portability_enumeration() const { return portability_; }

  // Validation messages seen so far (warnings and errors), and a way to take them.
  std::vector<std::string> take_messages();
  void record_message(std::string m);

 private:
  Api api_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  bool owned_ = true, portability_ = false;
  std::mutex mutex_;
  std::vector<std::string> messages_;
};

struct Device {
  std::shared_ptr<Instance> instance;
  Api api;  // instance entry points plus this device's
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  uint32_t queue_family = 0;
  bool owned = true;
  VulkanDeviceInfo info;
  VkPhysicalDeviceMemoryProperties memory{};
  bool timestamps = false;

  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device();
};

// Picks a device per `spec`: "" or "vulkan" the best of any type (discrete > integrated >
// virtual > cpu), "gpu" the best discrete or integrated one (nullptr if none), otherwise the
// first whose index or name (case-insensitive substring) matches. Throws naming the devices.
std::unique_ptr<Device> open_device(std::shared_ptr<Instance> instance, const std::string& spec);
std::unique_ptr<Device> adopt_device(std::shared_ptr<Instance> instance, const VulkanExternalDevice& d);

}  // namespace meganeura::vk
