// Shared by the Vulkan tests: whether a device exists (else the test is skipped with the
// reason), and session options with the validation layer on, so any message fails the test.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "meganeura/backend.h"
#include "meganeura/session.h"

namespace meganeura::testing_vulkan {

// Empty when a Vulkan device is present; else why not.
inline std::string missing_device() {
  try {
    if (vulkan_devices().empty()) return "no Vulkan device on this machine";
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The validation layer is on unless MEGANEURA_TEST_VALIDATION=0: for a machine without the
// layer installed (scripts/gpu-check.sh says in its summary when it ran so).
inline bool validation_wanted() {
  const char* v = std::getenv("MEGANEURA_TEST_VALIDATION");
  return !(v && std::string(v) == "0");
}

// Devices for planning-only tests: a CPU-emulated one with lavapipe's limits, and a discrete
// GPU's (more shared memory, 4 GiB bindings).
inline VulkanDeviceInfo lavapipe_like_device() {
  VulkanDeviceInfo d;
  d.name = "lavapipe-like";
  d.type = "cpu";
  d.max_workgroup_invocations = d.max_workgroup_size[0] = 1024;
  d.max_shared_memory = 32768;
  d.max_storage_buffer_range = uint64_t(1) << 27;
  d.max_memory_allocation_size = uint64_t(1) << 31;
  d.max_workgroup_count[0] = d.max_workgroup_count[1] = d.max_workgroup_count[2] = 65535;
  return d;
}
inline VulkanDeviceInfo gpu_like_device() {
  VulkanDeviceInfo d = lavapipe_like_device();
  d.name = "gpu-like";
  d.type = "discrete";
  d.max_shared_memory = 49152;
  d.max_storage_buffer_range = (uint64_t(1) << 32) - 1;
  return d;
}

#define MEGANEURA_REQUIRE_VULKAN()                                    \
  do {                                                                \
    std::string why_ = ::meganeura::testing_vulkan::missing_device(); \
    if (!why_.empty()) GTEST_SKIP() << "skipped: " << why_;           \
  } while (0)

inline SessionOptions vulkan_options(uint64_t seed = 1) {
  SessionOptions o;
  o.device = Device::vulkan;
  o.seed = seed;
  o.vulkan_validation = validation_wanted();
  o.vulkan_cache_dir = "-";  // tests never share a cache through the user's home
  return o;
}

// The CPU backend's f64 oracle running `g` (every float tensor computed in double).
inline void add_f64_oracle(Session& oracle, const Graph& g) {
  PlanOptions f64;
  f64.float_dtype = DType::f64;
  oracle.add(plan(g, f64));
}

}  // namespace meganeura::testing_vulkan
