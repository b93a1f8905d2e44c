// `meganeura energy recommend`: the power limit (and batch size) that minimise a planned run's
// energy and its energy x time, from the physical model swept over the device's power-limit range.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "energy/cli.h"
#include "energy/hardware.h"
#include "energy/svg.h"

namespace meganeura::energy {
namespace {

[[noreturn]] void invalid(const std::string& what) { throw std::invalid_argument("[energy] " + what); }

struct Point {
  double limit_w = 0, batch = 0, time_s = 0, kwh = 0, power_w = 0;
};

nlohmann::json point_json(const Point& p, const Point& base) {
  return {{"power_limit_w", p.limit_w},
          {"batch", p.batch},
          {"time_s", p.time_s},
          {"energy_kwh", p.kwh},
          {"average_power_w", p.power_w},
          {"time_change", p.time_s / base.time_s - 1},
          {"energy_change", p.kwh / base.kwh - 1}};
}

// A chart series: "a40 energy", with ", batch 32" where several batches are swept.
std::string series_name(const std::string& gpu, const char* what, double batch, size_t batches) {
  return batches > 1 ? fmt::format("{} {}, batch {:g}", gpu, what, batch) : fmt::format("{} {}", gpu, what);
}

// The limits swept: the range in steps of `step_w` (1 W, coarser past 600 points), both ends and
// the default limit itself.
std::vector<double> sweep_limits(const DeviceSpec& dev, double step_w) {
  const double lo = dev.power_limit_min_w, hi = dev.power_limit_max_w;
  if (!(hi > 0))
    invalid(dev.key + " has no power-limit range in the hardware table (power_limit_min_w, power_limit_max_w)");
  if (step_w < 0 || !std::isfinite(step_w)) invalid("--step must be a positive number of watts");
  const double step = step_w > 0 ? step_w : std::max(1.0, (hi - lo) / 600);
  std::vector<double> out;
  for (double w = lo; w < hi; w += step) out.push_back(w);
  out.push_back(hi);
  out.push_back(dev.default_power_limit_w());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Point predict_point(const PredictOptions& run, const DeviceSpec& dev, const PhysicalParams& params, double batch,
                    double limit_w) {
  TransformerConfig t = run.transformer;
  if (t.vocab < 0) t.vocab = run.family == "bert" ? 30522 : run.family == "gpt" ? 50257 : 0;
  t.lm_head = run.family == "gpt";
  t.batch = batch;
  ParallelConfig par = run.parallel;
  par.power_limit_w = limit_w;
  const PhysicalPrediction p = predict_transformer(t, par, dev, params);
  return {limit_w, batch, p.time_s, p.kwh, p.average_power_w};
}

// `chart` gets the device's energy and time curves, against the limit in W or, with `relative`, in % of its TDP.
nlohmann::json recommend_device(const RecommendOptions& o, const DeviceSpec& dev, const PhysicalParams& params,
                                bool relative, std::vector<Series>& chart) {
  const auto x_of = [&](double w) { return relative ? 100 * w / dev.max_w : w; };
  const std::vector<double> limits = sweep_limits(dev, o.step_w);
  const std::vector<double> batches = o.batches.empty() ? std::vector<double>{o.run.transformer.batch} : o.batches;
  const Point base = predict_point(o.run, dev, params, o.run.transformer.batch, dev.default_power_limit_w());
  Point best_e = base, best_et = base;
  nlohmann::json notes = nlohmann::json::array(), sweep = nlohmann::json::array();
  for (double batch : batches) {
    Series energy{series_name(dev.key, "energy", batch, batches.size()), {}, false, {}};
    Series time{series_name(dev.key, "time", batch, batches.size()), {}, true, {}};
    try {
      // From the highest limit down, so a tie keeps the faster setting.
      for (auto it = limits.rbegin(); it != limits.rend(); ++it) {
        const Point p = predict_point(o.run, dev, params, batch, *it);
        sweep.push_back({{"power_limit_w", p.limit_w}, {"batch", batch}, {"time_s", p.time_s}, {"energy_kwh", p.kwh}});
        energy.points.emplace_back(x_of(p.limit_w), p.kwh / base.kwh);
        time.points.emplace_back(x_of(p.limit_w), p.time_s / base.time_s);
        if (p.kwh < best_e.kwh) best_e = p;
        if (p.kwh * p.time_s < best_et.kwh * best_et.time_s) best_et = p;
      }
    } catch (const std::invalid_argument& e) {
      notes.push_back(fmt::format("batch {:g} left out: {}", batch, e.what()));
      continue;
    }
    chart.push_back(std::move(energy));
    chart.push_back(std::move(time));
  }
  for (Series& s : chart) {
    if (s.name == series_name(dev.key, "energy", best_e.batch, batches.size())) {
      s.marks.emplace_back(x_of(best_e.limit_w), best_e.kwh / base.kwh);
    }
  }
  return {{"device", dev.key},
          {"name", dev.name},
          {"tdp_w", dev.max_w},
          {"power_limit_range_w", {dev.power_limit_min_w, dev.power_limit_max_w}},
          {"default", point_json(base, base)},
          {"min_energy", point_json(best_e, base)},
          {"min_energy_time", point_json(best_et, base)},
          {"notes", notes},
          {"sweep", sweep}};
}

void print_recommend(const nlohmann::json& j) {
  std::printf("%-14s %-20s %8s %6s %10s %11s %8s %8s\n", "gpu", "setting", "limit W", "batch", "time h", "energy kWh",
              "time", "energy");
  for (const auto& r : j["recommendations"]) {
    for (const char* k : {"default", "min_energy", "min_energy_time"}) {
      const auto& p = r[k];
      const std::string label = std::string(k) == "default"      ? "default (TDP)"
                                : std::string(k) == "min_energy" ? "least energy"
                                                                 : "least energy x time";
      std::printf("%-14s %-20s %8.0f %6g %10.3f %11.4g %+7.1f%% %+7.1f%%\n", r["device"].get<std::string>().c_str(),
                  label.c_str(), p["power_limit_w"].get<double>(), p["batch"].get<double>(),
                  p["time_s"].get<double>() / 3600, p["energy_kwh"].get<double>(), 100 * p["time_change"].get<double>(),
                  100 * p["energy_change"].get<double>());
    }
    for (const auto& n : r["notes"]) std::printf("note: %s\n", n.get<std::string>().c_str());
  }
  if (j.contains("svg_path")) std::printf("wrote %s\n", j["svg_path"].get<std::string>().c_str());
}

}  // namespace

nlohmann::json run_recommend(const RecommendOptions& o) {
  const PredictOptions& r = o.run;
  if (r.transformer.layers == 0 || r.transformer.hidden == 0 || r.transformer.batch == 0 || r.transformer.seq == 0 ||
      r.transformer.tokens == 0) {
    invalid("recommend needs --layers, --hidden, --batch, --seq and --tokens");
  }
  if (r.family != "bert" && r.family != "gpt" && r.family != "none") {
    invalid("unknown --family '" + r.family + "' (expected bert, gpt or none)");
  }
  for (double b : o.batches) {
    if (!(b > 0) || b != std::floor(b)) invalid(fmt::format("--batches: {:g} is not a positive whole batch size", b));
  }
  std::vector<std::string> gpus = o.gpus;
  if (gpus.empty() && !r.gpu.empty()) gpus.push_back(r.gpu);
  const HardwareTable table = HardwareTable::load_default(r.hardware);
  if (gpus.empty()) invalid("recommend needs --gpu (one or more of the hardware table's devices)");
  nlohmann::json j;
  j["recommendations"] = nlohmann::json::array();
  std::vector<Series> chart;
  for (const std::string& g : gpus) {
    j["recommendations"].push_back(recommend_device(o, table.find(g), table.params(), gpus.size() > 1, chart));
  }
  if (!o.svg.empty()) {
    const std::string title = gpus.size() == 1 ? "Energy and time against the power limit, " + gpus[0]
                                               : "Energy and time against the power limit";
    const std::string x_label = gpus.size() == 1 ? "power limit (W)" : "power limit (% of TDP)";
    write_text_file(o.svg, line_chart_svg(chart, title, x_label, "energy (solid), time (dashed) / at the TDP"));
    j["svg_path"] = o.svg;
  }
  j["hardware_table"] = table.origin();
  return j;
}

void add_recommend_command(CLI::App& energy) {
  auto o = std::make_shared<RecommendOptions>();
  auto json = std::make_shared<bool>(false);
  o->run.transformer.vocab = -1;
  PredictOptions& r = o->run;
  CLI::App* c = energy.add_subcommand(
      "recommend", "The power limit (and batch) that minimise a planned run's energy, and its energy x time");
  c->add_option("--family", r.family, "bert, gpt or none")->capture_default_str();
  c->add_option("--layers", r.transformer.layers, "Transformer layers (L)");
  c->add_option("--hidden", r.transformer.hidden, "Hidden size (d)");
  c->add_option("--heads", r.transformer.heads, "Attention heads (default hidden/64)");
  c->add_option("--ff", r.transformer.ff, "Feed-forward size (default 4*hidden)");
  c->add_option("--vocab", r.transformer.vocab, "Vocabulary size (default by family)");
  c->add_option("--batch", r.transformer.batch, "Planned sequences per step per data-parallel rank (B)");
  c->add_option("--batches", o->batches, "Batch sizes the run may use instead (comma-separated)")->delimiter(',');
  c->add_option("--seq", r.transformer.seq, "Sequence length (S)");
  c->add_option("--tokens", r.transformer.tokens, "Tokens over the whole run");
  c->add_option("--grad-accum", r.transformer.grad_accum, "Gradient accumulation steps");
  c->add_option("--dtype", r.transformer.dtype, "Matmul dtype: fp32, tf32, fp16, bf16, fp8")->capture_default_str();
  c->add_option("--gpus", r.parallel.gpus, "GPUs (N)")->capture_default_str();
  c->add_option_function<std::string>(
      "--strategy", [o](const std::string& s) { o->run.parallel.strategy = parse_strategy(s); },
      "baseline, dp, fsdp or tp");
  c->add_option_function<std::string>(
      "--tp-scheme", [o](const std::string& s) { o->run.parallel.tp_scheme = parse_tp_scheme(s); },
      "TP split: megatron or ffn");
  c->add_flag("--pcie", r.parallel.over_pcie, "GPUs talk over PCIe instead of the table's link");
  c->add_option("--gpu,--device-name", o->gpus, "Devices from the hardware table (comma-separated or repeated)")
      ->delimiter(',');
  c->add_option("--step", o->step_w, "Power-limit sweep step in W (default 1)");
  c->add_option("--hardware", r.hardware, "Hardware table (default: user copy, else the shipped one)");
  c->add_option("--svg", o->svg, "Write energy and time against the power limit as an SVG chart");
  c->add_flag("--json", *json, "Print JSON");
  c->callback([o, json] {
    const nlohmann::json j = run_recommend(*o);
    if (*json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      print_recommend(j);
    }
  });
}

}  // namespace meganeura::energy
