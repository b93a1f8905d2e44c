// Job telemetry: GPU samples and Xid/ECC events from the gpualert-gpu helper (which
// loads NVML; started only where the NVIDIA driver is), host energy through EnergyMeter
// (RAPL), and the cgroup v2 and kernel evidence of OOM kills.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace meganeura::alert {

struct GpuStats {
  unsigned index = 0;
  std::string name;
  unsigned samples = 0;
  double util_avg = 0, util_max = 0;
  uint64_t mem_max_bytes = 0, mem_total_bytes = 0;
  unsigned temp_max_c = 0;
  double power_avg_w = 0, power_max_w = 0;
  double energy_j = 0;  // from the driver's counter, when it has one
  unsigned last_util = 0;
};

struct TelemetryResult {
  bool gpu_available = false;
  std::string gpu_note;  // why there is no GPU data
  std::vector<GpuStats> gpus;
  std::vector<std::string> gpu_events;
  nlohmann::json energy;  // EnergyReading as JSON
  uint64_t cgroup_oom_kills = 0;
  std::vector<std::string> kernel_oom;
};

class Telemetry {
 public:
  // `helper_exe`: the gpualert-gpu binary; empty means no GPU telemetry.
  explicit Telemetry(double interval_s = 1.0, std::string helper_exe = {});
  ~Telemetry();
  Telemetry(const Telemetry&) = delete;
  Telemetry& operator=(const Telemetry&) = delete;

  // Records the evidence baselines (cgroup OOM count, end of the kernel log). Call before
  // the child starts so that nothing it causes is missed.
  void arm();
  // Starts the energy meter and GPU sampling (arming first if needed); returns at once,
  // sampling happens on threads.
  void start();
  TelemetryResult stop();
  // True when NVML is present and every GPU's utilisation is at most 5%.
  // False when no GPU data is available (no evidence either way).
  bool gpus_idle() const;
  bool has_gpu_data() const;

  struct State;
  // How long stop() waits for the helper's last sample before killing it.
  static constexpr double kHelperStopDeadlineS = 2.0;

 private:
  std::unique_ptr<State> state_;
};

// The cgroup v2 directory named by /proc/self/cgroup's "0::" line; empty when none.
std::string cgroup_v2_dir(std::string_view proc_self_cgroup);
// The oom_kill count in a memory.events file's text; 0 when absent.
uint64_t parse_oom_kills(std::string_view memory_events);

nlohmann::json to_json(const TelemetryResult& t);

}  // namespace meganeura::alert
