// The hardware table: per-device peak throughput, memory and link bandwidth and power, read
// from a TOML data file in which every number names its source (data/hardware.toml). The
// physical energy model prices work with it; calibration writes measured per-device energy
// coefficients into a user-writable copy so the shipped table stays pristine.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "energy/params.h"

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
  // Clock range: the boost clock the peaks are quoted at, and the base clock the board holds
  // within its power limit. 0 when the table gives none.
  double base_clock_mhz = 0;
  double boost_clock_mhz = 0;
  bool tensor_cores = true;  // the half-precision peaks are matrix-unit (tensor/matrix core) rates
  // Power-limit range the driver accepts (nvidia-smi -pl, rocm-smi --setpoweroverdrive); the
  // default limit is max_w (the board's TDP). 0 when the table gives none.
  double power_limit_min_w = 0;
  double power_limit_max_w = 0;
  // Figures for the plausibility checks: memory bus width and data rate per pin (bandwidth <=
  // bits x Gb/s / 8), fp32 lanes and fp32 operations per lane and clock (fp32 peak <= lanes x
  // ops x boost clock). 0 when the table gives none.
  double memory_bus_bits = 0;
  double memory_data_rate_gbps = 0;
  double fp32_lanes = 0;
  double fp32_ops_per_clock = 0;
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
  // Share of the peak rates a compute-bound kernel sustains: base over boost clock (a board at
  // its power limit holds the base clock), 1 without a clock range.
  double sustained_clock_ratio() const;
  // The limit in force when none is set: the TDP (max_w).
  double default_power_limit_w() const { return max_w; }
};

// Every way `d` falls short of a complete, plausible entry: a missing field or source, a power
// limit range that does not contain the TDP, a peak above clock x lanes x ops per clock, a
// bandwidth above bus width x data rate. Each line names the device and the field. Empty when
// the entry is complete and plausible.
std::vector<std::string> entry_problems(const DeviceSpec& d);

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
  const std::vector<DeviceSpec>& devices() const { return devices_; }

  // The [model] and [host] coefficients, and the [fitted] range they hold for.
  const PhysicalParams& params() const { return params_; }
  const FittedRange& fitted() const { return fitted_; }
  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
  std::vector<DeviceSpec> devices_;
  PhysicalParams params_;
  FittedRange fitted_;
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

// Writes fitted [model] and [host] sections and the [fitted] range into the table at `path` (a
// user copy), keeping every device entry.
void write_model_params(const std::string& path, const PhysicalParams& params, const FittedRange& range,
                        const std::string& source);

}  // namespace meganeura::energy
