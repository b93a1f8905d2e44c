#include "energy/params.h"

namespace meganeura::energy {

const std::vector<ParamKnob>& param_knobs() {
  using P = PhysicalParams;
  static const std::vector<ParamKnob> knobs = {
      {"model", "startup_s", &P::startup_s, 1, false},
      {"model", "step_overhead_ms", &P::step_overhead_s, 1e-3, false},
      {"model", "dispatch_overhead_us", &P::dispatch_overhead_s, 1e-6, false},
      {"model", "optimizer_tensor_us", &P::optimizer_tensor_s, 1e-6, false},
      {"model", "link_latency_us", &P::link_latency_s, 1e-6, false},
      {"model", "sharded_op_us", &P::sharded_op_s, 1e-6, false},
      {"model", "compute_efficiency", &P::compute_efficiency, 1, false},
      {"model", "memory_efficiency", &P::memory_efficiency, 1, false},
      {"model", "link_efficiency", &P::link_efficiency, 1, false},
      {"model", "comm_overlap", &P::comm_overlap, 1, true},
      {"model", "idle_scale", &P::idle_scale, 1, false},
      {"model", "busy_fraction", &P::busy_fraction, 1, false},
      {"model", "fixed_power_fraction", &P::fixed_power_fraction, 1, false},
      {"model", "dynamic_scale", &P::dynamic_scale, 1, false},
      {"model", "interval_ln", &P::interval_ln, 1, false},
      {"host", "power_w", &P::host_power_w, 1, false},
      {"host", "rank_power_w", &P::rank_power_w, 1, false},
  };
  return knobs;
}

std::string knob_json_name(const ParamKnob& k) {
  return std::string(k.section) == "host" ? "host_" + std::string(k.key) : std::string(k.key);
}

}  // namespace meganeura::energy
