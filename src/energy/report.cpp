#include "energy/report.h"

#include <fmt/format.h>

#include <cmath>

namespace meganeura::energy {

nlohmann::json prediction_json(const PhysicalPrediction& p, double grid_g_per_kwh, bool dispatches) {
  nlohmann::json j;
  j["device"] = p.device;
  j["gpus"] = p.gpus;
  j["strategy"] = strategy_name(p.strategy);
  if (p.strategy == Strategy::kTensorParallel) j["tp_scheme"] = tp_scheme_name(p.tp_scheme);
  j["bound"] = p.bound;
  j["steps"] = p.steps;
  j["step_time_s"] = p.step_time_s;
  j["comm_time_per_step_s"] = p.comm_time_s;
  j["time_s"] = p.time_s;
  j["efficiency"] = p.efficiency;
  j["power_limit_w"] = p.power_limit.limit_w;
  j["compute_clock_mhz"] = p.power_limit.clock_mhz;
  j["average_power_w"] = p.average_power_w;
  j["energy_per_device_j"] = p.device_energy_j;
  j["energy_per_device_kwh"] = p.device_energy_j / 3.6e6;
  j["host_energy_j"] = p.host_energy_j;
  j["total_energy_j"] = p.total_energy_j;
  j["energy_kwh"] = p.kwh;
  j["j_per_token"] = p.joules_per_token;
  j["grid_g_per_kwh"] = grid_g_per_kwh;
  j["co2_kg"] = p.kwh * grid_g_per_kwh / 1000;
  j["interval_kwh"] = {p.kwh_low, p.kwh_high};
  nlohmann::json tt = nlohmann::json::object(), et = nlohmann::json::object();
  for (const Term& t : p.time_terms) tt[t.name] = t.value;
  for (const Term& t : p.energy_terms) et[t.name] = t.value;
  j["time_terms_s"] = tt;
  j["energy_terms_j"] = et;
  nlohmann::json layers = nlohmann::json::array();
  for (const CostEstimate& l : p.layers) {
    layers.push_back(
        {{"name", l.name}, {"time_s", l.time_s}, {"energy_j", l.energy_j}, {"flops", l.flops}, {"bytes", l.bytes}});
  }
  j["layers"] = layers;
  if (dispatches) {
    nlohmann::json d = nlohmann::json::array();
    for (const CostEstimate& c : p.dispatches) {
      d.push_back({{"name", c.name},
                   {"kind", c.kind},
                   {"layer", c.layer},
                   {"flops", c.flops},
                   {"bytes", c.bytes},
                   {"time_s", c.time_s},
                   {"energy_j", c.energy_j},
                   {"bound", c.bound}});
    }
    j["dispatches"] = d;
  }
  return j;
}

nlohmann::json reading_json(const EnergyReading& r) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceEnergy& d : r.devices) {
    devices.push_back({{"name", d.name},
                       {"source", d.source},
                       {"joules", d.joules},
                       {"avg_watts", d.avg_watts},
                       {"peak_watts", d.peak_watts},
                       {"in_total", d.in_total}});
  }
  return {{"duration_s", r.duration_s},
          {"total_joules", r.total_joules},
          {"total_kwh", r.total_joules / 3.6e6},
          {"devices", devices},
          {"notes", r.notes}};
}

nlohmann::json reference_fit_json(const ReferenceFit& f) {
  static const char* kNames[] = {"intercept", "ln_compute", "ln_memory", "ln_efficiency", "fsdp", "tp"};
  const auto b = f.coefficients.as_array();
  nlohmann::json coef, hc3, cluster;
  for (int i = 0; i < 6; ++i) {
    coef[kNames[i]] = b[i];
    hc3[kNames[i]] = f.se_hc3[i];
    cluster[kNames[i]] = f.se_cluster[i];
  }
  return {{"coefficients", coef},  {"se_hc3", hc3}, {"se_cluster", cluster},
          {"r2_in_sample", f.r2},  {"n", f.n},      {"clusters", f.clusters},
          {"warnings", f.warnings}};
}

nlohmann::json physical_params_json(const PhysicalParams& p) {
  nlohmann::json j = nlohmann::json::object();
  for (const ParamKnob& k : param_knobs()) j[knob_json_name(k)] = p.*k.member / k.unit;
  return j;
}

namespace {
// A score over no runs is null: 0 would read as a perfect RMSE.
nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
}  // namespace

nlohmann::json held_out_json(const HeldOut& h) {
  return {{"heldout_r2", number_or_null(h.r2)},
          {"heldout_rmse_ln", number_or_null(h.rmse_ln)},
          {"heldout_mape", number_or_null(h.mape)},
          {"n", h.n}};
}

std::string prediction_text(const PhysicalPrediction& p, double grid_g_per_kwh) {
  std::string s = fmt::format(
      "device {} x{} ({}): {:.4g} steps of {:.4g} ms ({:.4g} ms communication), {:.4g} s in all, "
      "predicted efficiency {:.3f}\n"
      "energy {:.4g} kWh [{:.4g}, {:.4g}]: {:.4g} kJ per device, {:.4g} kJ host; {:.4g} J/token; "
      "{:.4g} kg CO2 at {:g} g/kWh\n",
      p.device, p.gpus, strategy_name(p.strategy), p.steps, p.step_time_s * 1e3, p.comm_time_s * 1e3, p.time_s,
      p.efficiency, p.kwh, p.kwh_low, p.kwh_high, p.device_energy_j / 1e3, p.host_energy_j / 1e3, p.joules_per_token,
      p.kwh * grid_g_per_kwh / 1000, grid_g_per_kwh);
  s += "time:";
  for (const Term& t : p.time_terms) s += fmt::format(" {} {:.4g} s;", t.name, t.value);
  s += "\nenergy:";
  for (const Term& t : p.energy_terms) s += fmt::format(" {} {:.4g} kJ;", t.name, t.value / 1e3);
  s += "\n";
  for (const CostEstimate& l : p.layers) {
    s += fmt::format("  {:<12} {:>10.4g} s {:>12.4g} J\n", l.name, l.time_s, l.energy_j);
  }
  return s;
}

std::string reading_text(const EnergyReading& r) {
  std::string s = fmt::format("duration {:.3f} s, energy {:.4g} J ({:.4g} kWh)\n", r.duration_s, r.total_joules,
                              r.total_joules / 3.6e6);
  for (const DeviceEnergy& d : r.devices) {
    s += fmt::format("  {:<28} {:<12} {:>12.4g} J  avg {:>8.2f} W  peak {:>8.2f} W{}\n", d.name, d.source, d.joules,
                     d.avg_watts, d.peak_watts, d.in_total ? "" : "  (not in total)");
  }
  for (const std::string& n : r.notes) s += "  note: " + n + "\n";
  return s;
}

}  // namespace meganeura::energy
