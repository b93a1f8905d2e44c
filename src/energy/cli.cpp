#include "energy/cli.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <iostream>

#include "energy/hardware.h"
#include "energy/measure.h"
#include "energy/nvml.h"
#include "energy/reference_model.h"
#include "energy/report.h"
#include "energy/svg.h"

namespace meganeura::energy {
namespace {

[[noreturn]] void invalid(const std::string& what) { throw std::invalid_argument("[energy] " + what); }

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

void write_layer_svg(const PhysicalPrediction& p, const std::string& path, const std::string& title) {
  std::vector<Bar> bars;
  // The energy terms of the whole run first (all devices and the host), then the per-layer
  // breakdown of one device.
  for (const Term& t : p.energy_terms) bars.push_back({"run: " + t.name, t.value / 1e3});
  for (const CostEstimate& l : p.layers) bars.push_back({l.name, l.energy_j / 1e3});
  write_text_file(path, bar_chart_svg(bars, title, "kJ"));
}

nlohmann::json predict_program(const PredictOptions& o, const EnergyCliHooks& hooks, const HardwareTable& table) {
  if (o.parallel.power_limit_w != 0) invalid("--power-limit applies to transformers given by flags, not to --model");
  if (!hooks.program_work) {
    invalid("--model " + o.program + ": this build has no compiled programs to price");
  }
  if (!hooks.models.empty() && std::find(hooks.models.begin(), hooks.models.end(), o.program) == hooks.models.end()) {
    invalid("unknown model '" + o.program + "'; known: " + joined(hooks.models));
  }
  if (o.gpu.empty()) invalid("--model needs --device-name (one of: " + joined(table.keys()) + ")");
  const std::vector<WorkItem> work = hooks.program_work(o.program, o.workload);
  const DeviceSpec& dev = table.find(o.gpu);
  const double tokens = o.tokens_per_step > 0   ? o.tokens_per_step
                        : hooks.tokens_per_step ? hooks.tokens_per_step(o.program)
                                                : 0;
  const PhysicalPrediction p = predict_work(work, dev, table.params(), o.transformer.dtype, o.steps, tokens);
  nlohmann::json j = prediction_json(p, o.grid_g_per_kwh, true);
  j["method"] = "physical";
  j["model"] = o.program;
  if (!o.workload.empty()) j["workload"] = o.workload;
  j["step_energy_j"] = p.total_energy_j / p.steps;
  j["tokens_per_step"] = tokens;
  if (tokens <= 0) j["j_per_token"] = nullptr;  // the model has no tokens: no J/token, not 0
  j["hardware_table"] = table.origin();
  if (!o.svg.empty()) write_layer_svg(p, o.svg, o.program + " on " + dev.key + ": energy per layer");
  return j;
}

}  // namespace

namespace {

nlohmann::json predict_reference(const PredictOptions& o) {
  if (o.parallel.gpus > 1 && !o.efficiency) {
    invalid(
        "the reference model needs the measured --efficiency of a multi-GPU run (or use --gpu "
        "with the physical model, which predicts it)");
  }
  if (o.parallel.gpus == 1 && o.parallel.strategy != Strategy::kBaseline) {
    invalid("strategy " + strategy_name(o.parallel.strategy) + " needs --gpus of 2 or more");
  }
  if (o.parallel.gpus > 1 && o.parallel.strategy == Strategy::kBaseline) {
    invalid("--gpus " + std::to_string(o.parallel.gpus) + " needs a strategy (dp, fsdp or tp)");
  }
  const TransformerConfig& t = o.transformer;
  const ReferenceInputs in{t.layers,           t.hidden, t.batch, t.seq, t.tokens, o.efficiency.value_or(1.0),
                           o.parallel.strategy};
  const double kwh = reference_predict_kwh(in);
  const auto x = reference_features(in);
  // The published fit's held-out RMSE in ln space gives the interval.
  return {{"energy_kwh", kwh},
          {"interval_kwh", {kwh * std::exp(-0.253), kwh * std::exp(0.253)}},
          {"ln_compute", x[1]},
          {"ln_memory", x[2]},
          {"efficiency", in.efficiency},
          {"j_per_token", kwh * 3.6e6 / t.tokens},
          {"co2_kg", kwh * o.grid_g_per_kwh / 1000}};
}

// The physical model on the table's device, with a warning for every way the run lies outside
// the range the table's coefficients were fitted to.
nlohmann::json predict_physical(const PredictOptions& o) {
  const HardwareTable table = HardwareTable::load_default(o.hardware);
  if (o.gpu.empty()) invalid("the physical model needs --gpu (one of: " + joined(table.keys()) + ")");
  TransformerConfig t = o.transformer;
  if (t.vocab < 0) t.vocab = o.family == "bert" ? 30522 : o.family == "gpt" ? 50257 : 0;
  t.lm_head = o.family == "gpt";
  const DeviceSpec& dev = table.find(o.gpu);
  const PhysicalPrediction p = predict_transformer(t, o.parallel, dev, table.params());
  nlohmann::json j = prediction_json(p, o.grid_g_per_kwh, false);
  j["hardware_table"] = table.origin();
  j["interval_ln"] = table.params().interval_ln;
  j["warnings"] = range_warnings(table.fitted(), dev.key, t, o.parallel);
  if (!o.svg.empty()) {
    write_layer_svg(p, o.svg, fmt::format("{}x{} on {}: energy per layer", t.layers, t.hidden, dev.key));
  }
  return j;
}

}  // namespace

nlohmann::json run_predict(const PredictOptions& o, const EnergyCliHooks& hooks) {
  if (!o.program.empty()) return predict_program(o, hooks, HardwareTable::load_default(o.hardware));
  if (o.family != "bert" && o.family != "gpt" && o.family != "none") {
    invalid("unknown --family '" + o.family + "' (expected bert, gpt or none)");
  }
  std::string method = o.method;
  if (method.empty()) method = o.gpu.empty() ? "reference" : o.efficiency ? "both" : "physical";
  if (method != "reference" && method != "physical" && method != "both") {
    invalid("unknown --method '" + method + "' (expected reference, physical or both)");
  }
  if (method == "reference" && o.parallel.power_limit_w != 0) {
    invalid("the reference model has no power-limit input; give --gpu for the physical model");
  }
  nlohmann::json j;
  j["method"] = method;
  if (method != "physical") {
    j["reference"] = predict_reference(o);
    j["energy_kwh"] = j["reference"]["energy_kwh"];
  }
  if (method != "reference") {
    j["physical"] = predict_physical(o);
    j["energy_kwh"] = j["physical"]["energy_kwh"];  // the physical model leads when both run: it needs no measurement
  }
  j["grid_g_per_kwh"] = o.grid_g_per_kwh;
  j["co2_kg"] = j["energy_kwh"].get<double>() * o.grid_g_per_kwh / 1000;
  return j;
}

namespace {

void print_predict(const nlohmann::json& j) {
  if (j.contains("reference")) {
    const auto& r = j["reference"];
    std::printf("reference model: %.5g kWh [%.5g, %.5g] (eta %.3g)\n", r["energy_kwh"].get<double>(),
                r["interval_kwh"][0].get<double>(), r["interval_kwh"][1].get<double>(), r["efficiency"].get<double>());
  }
  const nlohmann::json* p = j.contains("physical") ? &j["physical"] : j.contains("dispatches") ? &j : nullptr;
  if (p) {
    const auto& x = *p;
    std::printf(
        "physical model on %s x%d (%s, %s-bound): %.5g kWh [%.5g, %.5g], %.4g s, predicted efficiency %.3f,\n"
        "  %.4g kJ per device, %.4g kJ host, %.4g J/token, %.4g kg CO2 at %g g/kWh\n",
        x["device"].get<std::string>().c_str(), x["gpus"].get<int>(), x["strategy"].get<std::string>().c_str(),
        x["bound"].get<std::string>().c_str(), x["energy_kwh"].get<double>(), x["interval_kwh"][0].get<double>(),
        x["interval_kwh"][1].get<double>(), x["time_s"].get<double>(), x["efficiency"].get<double>(),
        x["energy_per_device_j"].get<double>() / 1e3, x["host_energy_j"].get<double>() / 1e3,
        x["j_per_token"].is_number() ? x["j_per_token"].get<double>() : NAN, x["co2_kg"].get<double>(),
        x["grid_g_per_kwh"].get<double>());
    std::printf("  power limit %.4g W: compute clock %.4g MHz, %.4g W average per device\n",
                x["power_limit_w"].get<double>(), x["compute_clock_mhz"].get<double>(),
                x["average_power_w"].get<double>());
    for (const auto& l : x["layers"]) {
      std::printf("  %-12s %12.4g s %12.4g J\n", l["name"].get<std::string>().c_str(), l["time_s"].get<double>(),
                  l["energy_j"].get<double>());
    }
    for (const auto& w : x.value("warnings", nlohmann::json::array())) {
      std::printf("warning: %s\n", w.get<std::string>().c_str());
    }
  }
}

void add_predict(CLI::App& energy, const EnergyCliHooks& hooks) {
  auto o = std::make_shared<PredictOptions>();
  o->transformer.vocab = -1;  // unset: the family decides
  CLI::App* c = energy.add_subcommand("predict", "Predict a training run's time and energy before it starts");
  c->add_option("--family", o->family,
                "Transformer family: bert (classifier head), gpt (language-model head, GPT-2 vocabulary) or none")
      ->capture_default_str();
  c->add_option("--method", o->method, "reference, physical or both (default: from the flags given)");
  c->add_option("--layers", o->transformer.layers, "Transformer layers (L)");
  c->add_option("--hidden", o->transformer.hidden, "Hidden size (d)");
  c->add_option("--heads", o->transformer.heads, "Attention heads (default hidden/64)");
  c->add_option("--ff", o->transformer.ff, "Feed-forward size (default 4*hidden)");
  c->add_option("--vocab", o->transformer.vocab, "Vocabulary size (default by family)");
  c->add_option("--batch", o->transformer.batch, "Sequences per step per data-parallel rank (B)");
  c->add_option("--seq", o->transformer.seq, "Sequence length (S)");
  c->add_option("--tokens", o->transformer.tokens, "Tokens over the whole run");
  c->add_option("--grad-accum", o->transformer.grad_accum, "Gradient accumulation steps");
  c->add_option("--dtype", o->transformer.dtype, "Matmul dtype: fp32, tf32, fp16, bf16, fp8")->capture_default_str();
  c->add_option("--gpus", o->parallel.gpus, "GPUs (N)")->capture_default_str();
  c->add_option_function<std::string>(
      "--strategy", [o](const std::string& s) { o->parallel.strategy = parse_strategy(s); },
      "baseline, dp, fsdp or tp");
  c->add_flag("--pcie", o->parallel.over_pcie, "GPUs talk over PCIe instead of the table's link");
  c->add_option_function<std::string>(
      "--tp-scheme", [o](const std::string& s) { o->parallel.tp_scheme = parse_tp_scheme(s); },
      "TP split: megatron (attention and FFN) or ffn (FFN only, eager sharded tensors)");
  c->add_option("--power-limit", o->parallel.power_limit_w,
                "Board power limit per GPU in W (default: the table's TDP; nvidia-smi -pl)");
  c->add_option_function<double>(
      "--efficiency", [o](double e) { o->efficiency = e; },
      "Measured parallel efficiency (T_1/T_N)/N, for the reference model");
  c->add_option("--gpu,--device-name", o->gpu, "Device from the hardware table (physical model)");
  c->add_option("--model", o->program, "One of our compiled Programs to price per dispatch");
  c->add_option("--workload", o->workload, "Workload of --model");
  c->add_option("--steps", o->steps, "Training steps of --model")->capture_default_str();
  c->add_option("--tokens-per-step", o->tokens_per_step, "Tokens per step of --model (for J/token)");
  c->add_option("--grid", o->grid_g_per_kwh, "Grid carbon intensity, g CO2 per kWh")->capture_default_str();
  c->add_option("--hardware", o->hardware, "Hardware table (default: user copy, else the shipped one)");
  c->add_option("--svg", o->svg, "Write the per-layer (or per-dispatch layer) breakdown as an SVG bar chart");
  c->add_flag("--json", o->json, "Print JSON");
  c->callback([o, hooks] {
    if (o->program.empty()) {
      if (o->transformer.layers == 0 || o->transformer.hidden == 0 || o->transformer.batch == 0 ||
          o->transformer.seq == 0 || o->transformer.tokens == 0) {
        invalid("predict needs --layers, --hidden, --batch, --seq and --tokens (or --model for a compiled Program)");
      }
    }
    const nlohmann::json j = run_predict(*o, hooks);
    if (o->json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      print_predict(j);
    }
  });
}

void print_fit(const nlohmann::json& j) {
  auto num = [](const nlohmann::json& v) { return v.is_number() ? v.get<double>() : NAN; };
  if (j["evaluation"] == "leave_one_gpu_out") {
    const auto& p = j["leave_one_gpu_out_pooled"];
    std::printf("each GPU predicted from the others: R2 %.3f, RMSE %.3f (ln), MAPE %.1f%% over %d runs of %d GPUs\n",
                num(j["heldout_r2"]), num(j["heldout_rmse_ln"]), num(j["heldout_mape"]), p["fitted"].value("n", 0),
                p.value("gpus", 0));
  }
  std::printf("%zu runs, %d group-disjoint folds\n", j["rows"].get<size_t>(), j["folds"].get<int>());
  auto row = [&](const std::string& name, const nlohmann::json& h, const char* r2, const char* rmse, const char* mape) {
    std::printf("%-28s %10.3f %12.3f %10.1f %6d\n", name.c_str(), num(h[r2]), num(h[rmse]), num(h[mape]),
                h.value("n", 0));
  };
  std::printf("%-28s %10s %12s %10s %6s\n", "held out", "R2 (ln)", "RMSE (ln)", "MAPE %", "n");
  for (const char* m : {"reference", "physical", "physical_defaults"}) {
    row(m, j["heldout"][m], "heldout_r2", "heldout_rmse_ln", "heldout_mape");
  }
  for (const auto& g : j["leave_one_gpu_out"]) {
    row("gpu out: " + g["gpu"].get<std::string>(), g["fitted"], "heldout_r2", "heldout_rmse_ln", "heldout_mape");
    row("  defaults", g["defaults"], "heldout_r2", "heldout_rmse_ln", "heldout_mape");
  }
  if (!j["leave_one_gpu_out"].empty()) {
    const auto& p = j["leave_one_gpu_out_pooled"];
    row("gpu out: pooled", p["fitted"], "heldout_r2", "heldout_rmse_ln", "heldout_mape");
    row("  defaults", p["defaults"], "heldout_r2", "heldout_rmse_ln", "heldout_mape");
    std::printf("interval (90%% of held-out GPUs' runs): x/ %.3g\n", std::exp(num(p["interval_ln"])));
  }
  if (j.contains("test")) {
    row("test: fitted", j["test"], "test_r2", "test_rmse_ln", "test_mape");
    row("test: defaults", j["test"]["defaults"], "heldout_r2", "heldout_rmse_ln", "heldout_mape");
  }
  for (const auto& n : j["notes"]) std::printf("note: %s\n", n.get<std::string>().c_str());
  std::printf("wrote %s and %s\n", j["json_path"].get<std::string>().c_str(), j["svg_path"].get<std::string>().c_str());
}

void add_fit(CLI::App& energy) {
  auto o = std::make_shared<FitOptions>();
  CLI::App* c = energy.add_subcommand("fit", "Fit the reference and physical models to measured runs");
  c->add_option("data", o->csv, "CSV of measured runs")->required();
  c->add_option("--model", o->model, "Model whose held-out scores lead the report: reference or physical")
      ->capture_default_str();
  c->add_option("--folds", o->folds, "Cross-validation folds (groups = configuration families)")->capture_default_str();
  c->add_option("--vocab", o->vocab, "Vocabulary size when the CSV has none")->capture_default_str();
  c->add_option("--test", o->test_csv, "Fit on DATA, score on this CSV (e.g. a GPU not in DATA)");
  c->add_option("--min-gpu-runs", o->min_gpu_runs, "Leave-one-GPU-out for GPUs with at least this many runs")
      ->capture_default_str();
  c->add_flag("--leave-one-gpu-out", o->leave_one_gpu_out,
              "Lead with the leave-one-GPU-out evaluation: each GPU predicted from the others and its table entry");
  c->add_option("--out", o->out, "Output prefix for OUT.json and OUT.svg (default: DATA.fit)");
  c->add_option("--hardware", o->hardware, "Hardware table (default: user copy, else the shipped one)");
  c->add_flag("--save", o->save, "Store the fitted physical coefficients in the user hardware table");
  c->add_flag("--json", o->json, "Print JSON");
  c->callback([o] {
    const nlohmann::json j = run_fit(*o);
    if (o->json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      print_fit(j);
    }
  });
}

void add_measure(CLI::App& energy) {
  struct MeasureCli {
    std::vector<std::string> command;
    MeterOptions meter;
    bool json = false;
    std::string output;
  };
  auto o = std::make_shared<MeasureCli>();
  o->meter.open_nvml = &Nvml::open;
  CLI::App* c = energy.add_subcommand("measure", "Run a command and report the energy it used");
  c->add_option("command", o->command, "Command and its arguments, after --")->required();
  c->add_flag("--json", o->json, "Print JSON (on stdout; the command keeps its own output)");
  c->add_option("--output,-o", o->output, "Also write the JSON report to this file");
  c->add_option("--nvml-library", o->meter.nvml_library, "NVML library to load");
  c->add_option("--powercap", o->meter.powercap_root, "powercap sysfs root")->capture_default_str();
  c->add_option("--hz", o->meter.sample_hz, "Sampling rate (at least 10 Hz)")->capture_default_str();
  c->callback([o] {
    const MeasureResult r = measure_command(o->command, o->meter);
    if (!r.failure.empty()) std::fprintf(stderr, "meganeura: [energy] %s\n", r.failure.c_str());
    nlohmann::json j = reading_json(r.reading);
    j["command"] = o->command;
    j["exit_code"] = r.exit_code;
    if (!o->output.empty()) write_text_file(o->output, j.dump(2) + "\n");
    if (o->json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::fprintf(stderr, "%s", reading_text(r.reading).c_str());
    }
    std::fflush(stdout);
    // CLI11 hands a RuntimeError's code back from App::exit without printing anything.
    if (r.exit_code != 0) throw CLI::RuntimeError(r.exit_code);
  });
}

void add_hardware(CLI::App& energy) {
  auto path = std::make_shared<std::string>();
  auto user_copy = std::make_shared<bool>(false);
  CLI::App* c = energy.add_subcommand("hardware", "List the hardware table, or create its user-writable copy");
  c->add_option("--hardware", *path, "Hardware table to read");
  c->add_flag("--user-copy", *user_copy,
              "Copy the shipped table to the user data directory (calibration writes there)");
  c->callback([path, user_copy] {
    if (*user_copy) std::printf("user table: %s\n", ensure_user_table().c_str());
    const HardwareTable t = HardwareTable::load_default(*path);
    std::printf("table: %s\n", t.origin().c_str());
    for (const std::string& k : t.keys()) {
      const DeviceSpec& d = t.find(k);
      std::string peaks;
      for (const auto& [dt, v] : d.peak_tflops) peaks += fmt::format(" {}={:g}", dt, v);
      const std::string clocks =
          d.boost_clock_mhz > 0 ? fmt::format("{:.0f}-{:.0f} MHz", d.base_clock_mhz, d.boost_clock_mhz) : "no clocks";
      const std::string limits = d.power_limit_max_w > 0
                                     ? fmt::format("limit {:.0f}-{:.0f} W", d.power_limit_min_w, d.power_limit_max_w)
                                     : "no limit range";
      std::printf("%-16s %-30s %6.0f GB/s %4.0f GB %4.0f-%3.0f W  %-14s %-18s link %g GB/s  TFLOP/s:%s\n", k.c_str(),
                  d.name.c_str(), d.memory_bandwidth_gbs, d.memory_gb, d.idle_w, d.max_w, clocks.c_str(),
                  limits.c_str(), d.link_gbs, peaks.c_str());
    }
  });
}

}  // namespace

void add_energy_commands(CLI::App& app, EnergyCliHooks hooks) {
  CLI::App* energy = app.add_subcommand("energy", "Predict, measure and fit the energy of training runs");
  energy->require_subcommand(1);
  add_predict(*energy, hooks);
  add_fit(*energy);
  add_measure(*energy);
  add_hardware(*energy);
  add_recommend_command(*energy);
}

}  // namespace meganeura::energy
