// Energy meters: what a device or the host consumed between start() and stop().
// Sources, best first: NVML's total-energy counter, NVML power sampled and integrated,
// RAPL through powercap, and a wall-clock-only fallback that reports duration alone.
// A sampling thread polls every source at `sample_hz` (at least 10 Hz): it integrates power
// where no counter exists, tracks peak power, and reads RAPL often enough to see every wrap.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace meganeura::energy {

class Nvml;

struct MeterOptions {
  // Opens NVML for the GPU channels: set it to &Nvml::open (energy/nvml.h). Null means no
  // GPU channels, and keeps NVML and dlopen out of programs that link the meter for RAPL.
  std::unique_ptr<Nvml> (*open_nvml)(const std::string& library, std::string* why) = nullptr;
  std::string nvml_library;  // empty: libnvidia-ml.so.1
  std::string powercap_root = "/sys/class/powercap";
  double sample_hz = 10.0;  // power polling rate where no counter exists
  bool use_rapl = true;
};

struct DeviceEnergy {
  std::string name;    // "gpu0 NVIDIA H100", "package-0", "dram-0"
  std::string source;  // "nvml-energy", "nvml-power", "rapl", ...
  double joules = 0;
  double avg_watts = 0;
  double peak_watts = 0;
  bool in_total = true;  // false for psys, which already contains the packages
};

struct EnergyReading {
  double duration_s = 0;
  std::vector<DeviceEnergy> devices;
  double total_joules = 0;         // sum over devices (psys never double-counted)
  std::vector<std::string> notes;  // why a source is missing ("RAPL counters are root-only")
};

class EnergyMeter {
 public:
  explicit EnergyMeter(MeterOptions options = {});
  ~EnergyMeter();
  EnergyMeter(const EnergyMeter&) = delete;
  EnergyMeter& operator=(const EnergyMeter&) = delete;

  void start();
  EnergyReading stop();

  struct State;

 private:
  MeterOptions options_;
  std::unique_ptr<State> state_;
};

}  // namespace meganeura::energy
