// NVML, loaded at run time with dlopen so that nothing links against the NVIDIA driver.
// Used by the energy meters and by gpualert's telemetry. Every query is optional: a field
// the driver cannot report stays empty instead of failing the whole sample.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace meganeura::energy {

struct NvmlSample {
  unsigned index = 0;
  std::string name;
  std::optional<unsigned> util_gpu_pct;  // nvmlDeviceGetUtilizationRates
  std::optional<unsigned> util_mem_pct;
  std::optional<uint64_t> mem_used_bytes;  // nvmlDeviceGetMemoryInfo
  std::optional<uint64_t> mem_total_bytes;
  std::optional<unsigned> temperature_c;    // nvmlDeviceGetTemperature (GPU sensor)
  std::optional<double> power_w;            // nvmlDeviceGetPowerUsage (mW -> W)
  std::optional<uint64_t> total_energy_mj;  // nvmlDeviceGetTotalEnergyConsumption (Volta+)
};

// A critical event reported by the driver (Xid error, ECC error).
struct NvmlEvent {
  unsigned index = 0;       // device index
  uint64_t type = 0;        // nvmlEventType* bit
  uint64_t data = 0;        // Xid number for Xid events
  std::string description;  // "Xid 79", "double-bit ECC error", ...
};

class Nvml {
 public:
  // Loads `library` (default "libnvidia-ml.so.1") and calls nvmlInit_v2. Returns null and
  // fills `why` when the library is absent or initialisation fails.
  static std::unique_ptr<Nvml> open(const std::string& library = "", std::string* why = nullptr);
  // Virtual, so that code holding an Nvml (the energy meter) refers to none of this file's
  // symbols: a statically linked program that never opens NVML carries no dlopen.
  virtual ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  virtual unsigned device_count() const;
  virtual NvmlSample sample(unsigned index) const;
  virtual std::vector<NvmlSample> sample_all() const;

  // Subscribes to Xid and ECC events on every device; false when unsupported.
  virtual bool watch_events();
  // Waits up to `timeout_ms` for one event; empty on timeout or when not watching.
  virtual std::optional<NvmlEvent> wait_event(unsigned timeout_ms);

  struct Api;  // resolved entry points (defined in nvml.cpp)

 private:
  Nvml() = default;
  void* lib_ = nullptr;
  std::unique_ptr<Api> api_;
  void* event_set_ = nullptr;
};

}  // namespace meganeura::energy
