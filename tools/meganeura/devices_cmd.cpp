// meganeura devices: the Vulkan devices this machine offers and what each supports.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "meganeura/backend.h"

namespace meganeura::cli {
namespace {

// How the accelerated contracts' products run on the device, and why.
std::string accelerated_path(const VulkanDeviceInfo& d) {
  return std::string("16-bit operands as packed words on the tiled GEMM, convolution and attention kernels; ") +
         (d.cooperative_matrix ? "the device has cooperative matrices, which the kernels do not use yet"
                               : "no cooperative matrices on this device");
}

nlohmann::json device_json(const VulkanDeviceInfo& d) {
  nlohmann::json heaps = nlohmann::json::array();
  for (const auto& h : d.heaps) heaps.push_back({{"bytes", h.bytes}, {"device_local", h.device_local}});
  return {{"index", d.index},
          {"name", d.name},
          {"vendor", d.vendor},
          {"vendor_id", d.vendor_id},
          {"device_id", d.device_id},
          {"driver", d.driver},
          {"type", d.type},
          {"api_version", d.api},
          {"heaps", heaps},
          {"subgroup_size", d.subgroup_size},
          {"subgroup_arithmetic", d.subgroup_arithmetic},
          {"f16", d.f16},
          {"bf16", d.bf16},
          {"int8", d.int8},
          {"storage8", d.storage8},
          {"cooperative_matrix", d.cooperative_matrix},
          {"portability_subset", d.portability_subset},
          {"accelerated", accelerated_path(d)},
          {"limits",
           {{"max_storage_buffer_range", d.max_storage_buffer_range},
            {"min_storage_buffer_offset_alignment", d.min_storage_buffer_offset_alignment},
            {"max_memory_allocation_size", d.max_memory_allocation_size},
            {"max_workgroup_invocations", d.max_workgroup_invocations},
            {"max_workgroup_count", {d.max_workgroup_count[0], d.max_workgroup_count[1], d.max_workgroup_count[2]}},
            {"max_shared_memory", d.max_shared_memory},
            {"max_push_constants", d.max_push_constants},
            {"timestamp_period_ns", d.timestamp_period_ns}}}};
}

std::string gib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", double(b) / double(1ull << 30));
  return buf;
}

int run_devices(bool json) {
  std::vector<VulkanDeviceInfo> devices;
  std::string error;
  try {
    devices = vulkan_devices();
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::string why;
  const bool gpu = error.empty() && vulkan_gpu_available(&why);
  const std::string automatic = gpu ? "vulkan" : "cpu";
  if (json) {
    nlohmann::json out = {{"devices", nlohmann::json::array()}, {"auto", automatic}};
    for (const auto& d : devices) out["devices"].push_back(device_json(d));
    if (!error.empty())
      out["error"] = error;
    else if (!gpu)
      out["auto_reason"] = why;
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (!error.empty()) {
    std::printf("no Vulkan: %s\n--device auto uses the CPU backend\n", error.c_str());
    return 0;
  }
  for (const auto& d : devices) {
    std::printf("%d: %s [%s, %s] Vulkan %s, driver %s\n", d.index, d.name.c_str(), d.type.c_str(), d.vendor.c_str(),
                d.api.c_str(), d.driver.c_str());
    std::string heaps;
    for (const auto& h : d.heaps)
      heaps += (heaps.empty() ? "" : ", ") + gib(h.bytes) + (h.device_local ? " device-local" : " host");
    std::printf("   heaps: %s\n", heaps.c_str());
    std::printf("   subgroup %u%s; f16 %s, bf16 %s, int8 %s, 8-bit storage %s, cooperative matrix %s%s\n",
                d.subgroup_size, d.subgroup_arithmetic ? " (arithmetic)" : "", d.f16 ? "yes" : "no",
                d.bf16 ? "yes" : "no", d.int8 ? "yes" : "no", d.storage8 ? "yes" : "no",
                d.cooperative_matrix ? "yes" : "no", d.portability_subset ? "; portability subset" : "");
    std::printf("   accelerated: %s\n", accelerated_path(d).c_str());
    std::printf(
        "   limits: storage buffer range %llu, offset alignment %llu, workgroup %u invocations, shared %u bytes, push "
        "%u bytes\n",
        static_cast<unsigned long long>(d.max_storage_buffer_range),
        static_cast<unsigned long long>(d.min_storage_buffer_offset_alignment), d.max_workgroup_invocations,
        d.max_shared_memory, d.max_push_constants);
  }
  if (devices.empty()) std::printf("no Vulkan devices\n");
  std::printf("--device auto uses %s\n",
              gpu ? "the first discrete or integrated GPU above" : ("the CPU backend: " + why).c_str());
  return 0;
}

}  // namespace

void add_devices_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* c = app.add_subcommand("devices", "list the Vulkan devices and what --device auto picks");
  c->add_flag("--json", *json, "JSON on stdout");
  c->callback([json] { throw CLI::RuntimeError(run_devices(*json)); });
}

}  // namespace meganeura::cli
