// The Vulkan benchmarks' --kernels values: VulkanOptions::Kernels by name.
#pragma once

#include <stdexcept>
#include <string>

#include "meganeura/backend.h"

namespace meganeura::bench {

constexpr const char* kKernelNames = "auto, naive, shared_memory or direct";

inline VulkanOptions::Kernels kernels_named(const std::string& name) {
  if (name == "auto") return VulkanOptions::Kernels::automatic;
  if (name == "naive") return VulkanOptions::Kernels::naive;
  if (name == "shared_memory") return VulkanOptions::Kernels::shared_memory;
  if (name == "direct") return VulkanOptions::Kernels::direct;
  throw std::invalid_argument("--kernels: '" + name + "' is not one of " + kKernelNames);
}

}  // namespace meganeura::bench
