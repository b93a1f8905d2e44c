// The hardware table: per-device peak throughput, memory and link bandwidth and power, read
// from a TOML data file in which every number names its source (data/hardware.toml). The
// physical energy model prices work with it; calibration writes measured per-device energy
// coefficients into a user-writable copy so the shipped table stays pristine.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace meganeura::energy {

struct DeviceSpec {
  std::string key;   // table key: "h100-sxm"
  std::string name;  // "NVIDIA H100 SXM5 80GB"
  std::string arch;
  std::vector<std::string> aliases;           // lower-case alternative names (NVML names, short forms)
  std::map<std::string, double> peak_tflops;  // dtype ("fp32", "bf16", ...) -> dense TFLOP/s
  double memory_bandwidth_gbs = 0;
  double memory_gb = 0;
  double idle_w = 0;
  double max_w = 0;
  std::string link;
  double link_gbs = 0;  // per direction, between GPUs of one node
  double pcie_gbs = 0;
  std::optional<double> e_flop_pj;  // calibrated; derived from powers when absent
  std::optional<double> e_byte_pj;
  std::map<std::string, std::string> sources;  // field -> citation

  // Peak FLOP/s for `dtype`. bf16 falls back to fp16 only on parts whose fp16 path has the
  // same rate and no bf16 entry exists; otherwise throws naming the supported dtypes.
  double peak_flops(const std::string& dtype) const;
  // Joules per floating-point operation and per byte of device-memory traffic. Derived
  // values split the dynamic power range (max - idle) so that a kernel at both roofs
  // draws exactly max power: 70% to arithmetic, 30% to memory traffic.
  double joules_per_flop(const std::string& dtype) const;
  double joules_per_byte() const;
};

struct HostSpec {
  double power_w = 0;        // CPU + DRAM of one node
  double rank_power_w = 30;  // added per GPU: the process driving it (a busy core, data loading)
};

// Knobs of the time model that are not properties of one device (see docs/energy.md).
struct ModelDefaults {
  double compute_efficiency = 0.45;
  double memory_efficiency = 0.75;
  double link_efficiency = 0.7;
  double dispatch_overhead_us = 20.0;
  double step_overhead_ms = 8.0;
  double comm_overlap = 0.3;
  double link_latency_us = 100.0;
  double busy_fraction = 0.3;
  double startup_s = 10.0;            // process start, device context, model and data set-up
  double fixed_power_fraction = 0.2;  // share of (max - idle) drawn during fixed, launch-bound time
  double idle_scale = 1.0;            // fitted scale on the table's idle power (1 until fitted)
  double dynamic_scale = 0.7;         // share of (max - idle) spent per FLOP and byte; with busy_fraction, 1

  double interval_ln = 0.35;  // half-width of the reported interval in ln space
};

class HardwareTable {
 public:
  // Parses a table; throws std::runtime_error "[energy] <path>: ..." naming the bad entry.
  static HardwareTable load(const std::string& path);
  static HardwareTable parse(const std::string& text, const std::string& origin);
  // The table the tools use: `explicit_path` when given, else the user copy when it exists,
  // else the shipped table.
  static HardwareTable load_default(const std::string& explicit_path = "");

  // Looks a device up by key, display name or alias (case-insensitive; spaces, dashes and
  // underscores are equivalent). Throws "[energy] unknown GPU 'x'; known: a, b, ..." otherwise.
  const DeviceSpec& find(const std::string& name) const;
  const DeviceSpec* try_find(const std::string& name) const;
  std::vector<std::string> keys() const;

  const HostSpec& host() const { return host_; }
  const ModelDefaults& model() const { return model_; }
  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
  std::vector<DeviceSpec> devices_;
  HostSpec host_;
  ModelDefaults model_;
};

// Where the shipped table is: the source tree's data/hardware.toml (compiled in), or next to
// the binary (bin/../share/meganeura/hardware.toml, bin/hardware.toml). Throws if none exists.
std::string shipped_table_path();
// $XDG_DATA_HOME/meganeura/hardware.toml (default ~/.local/share/...).
std::string user_table_path();
// Copies the shipped table to the user path unless a copy exists; returns the user path.
std::string ensure_user_table();
// Writes calibrated coefficients for one device into the table at `path` (a user copy),
// keeping every other entry.
void write_device_coefficients(const std::string& path, const std::string& device_key, double e_flop_pj,
                               double e_byte_pj, const std::string& source);

// Writes a fitted [model] section and host power into the table at `path` (a user copy),
// keeping every device entry.
void write_model_params(const std::string& path, const ModelDefaults& model, double host_power_w, double rank_power_w,
                        const std::string& source);

}  // namespace meganeura::energy
