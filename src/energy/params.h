// The coefficients of the physical energy model that hold for any device, and the range of runs
// they were fitted to. Everything that differs between GPUs comes from the hardware table's
// device entries (hardware.h); these are what its [model] and [host] sections store (in the
// file's units: microseconds, milliseconds) and what `energy fit` adjusts.
#pragma once

#include <string>
#include <vector>

namespace meganeura::energy {

struct PhysicalParams {
  // Time: host and software.
  double startup_s = 10.0;             // once per run: process start, device context, model and data set-up
  double step_overhead_s = 1e-3;       // per device step: the training loop, data hand-off, loss read-back
  double dispatch_overhead_s = 10e-6;  // per kernel launch in an eager framework (host dispatch)
  double optimizer_tensor_s = 100e-6;  // per parameter tensor and optimizer step: its own optimizer kernels
  double link_latency_s = 100e-6;      // per collective and ring hop, framework dispatch included
  double sharded_op_s = 200e-6;        // per op on a sharded (DTensor) tensor in eager mode, above a plain launch
  // Time: fractions of the datasheet rates a training step reaches.
  double compute_efficiency = 0.5;  // of the peak at the sustained (base) clock
  double memory_efficiency = 0.7;   // of the memory bandwidth
  double link_efficiency = 0.7;     // of the GPU-to-GPU link rate
  double comm_overlap = 0.3;        // share of DP/FSDP communication hidden behind compute (< 0: slower than the link)
  // Power: shares of each device's (max - idle) range, and the host.
  double idle_scale = 1.0;            // on the table's idle power
  double busy_fraction = 0.3;         // drawn while kernels or transfers run (clocks and voltage up)
  double fixed_power_fraction = 0.2;  // drawn in fixed, launch-bound time
  double dynamic_scale = 0.7;         // on the work-proportional energy (per FLOP and byte); with busy_fraction, 1
  double host_power_w = 100.0;        // CPU and DRAM of one node
  double rank_power_w = 30.0;         // per GPU: the host process driving it

  double interval_ln = 0.452;  // half-width of the reported interval in ln space
};

// One stored coefficient: its table section and key, the member it sets, and the SI value of
// one file unit (1e-6 for a time stored in microseconds). `signed_value` allows negatives.
struct ParamKnob {
  const char* section;  // "model" or "host"
  const char* key;
  double PhysicalParams::*member;
  double unit;
  bool signed_value;
};
// Every coefficient of PhysicalParams, in the order the table and the JSON list them.
const std::vector<ParamKnob>& param_knobs();
// The JSON name of a knob: its key, prefixed with "host_" for the [host] section.
std::string knob_json_name(const ParamKnob& k);

// The runs the coefficients were fitted to or checked against (the table's [fitted] section):
// predictions outside it carry a warning.
struct FittedRange {
  std::vector<std::string> gpus;  // hardware-table keys
  double min_parameters = 0, max_parameters = 0;
  double min_tokens_per_step = 0, max_tokens_per_step = 0;  // per device micro-step
  int min_gpus = 0, max_gpus = 0;
  std::vector<std::string> strategies;  // "baseline", "dp", "fsdp", "tp"
  std::string source;

  bool empty() const { return gpus.empty(); }
};

}  // namespace meganeura::energy
