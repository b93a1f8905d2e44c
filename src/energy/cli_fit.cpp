#include <cmath>
#include <filesystem>
#include <set>

#include "energy/cli.h"
#include "energy/fit.h"
#include "energy/hardware.h"
#include "energy/report.h"
#include "energy/svg.h"

namespace meganeura::energy {
namespace {

[[noreturn]] void invalid(const std::string& what) { throw std::invalid_argument("[energy] " + what); }

// An infinite ridge strength (null) keeps that half of the model at the table's defaults.
nlohmann::json strength(double l) { return std::isfinite(l) ? nlohmann::json(l) : nlohmann::json(nullptr); }

void check_options(const FitOptions& o) {
  if (o.model != "reference" && o.model != "physical") {
    invalid("unknown --model '" + o.model + "' (expected reference or physical)");
  }
  if (o.folds < 2) invalid("--folds must be at least 2");
  if (o.min_gpu_runs < 1) invalid("--min-gpu-runs must be at least 1");
}

// Reads a runs file and checks that every GPU it names is in the table.
Dataset load_checked(const std::string& path, const FitOptions& o, const HardwareTable& table) {
  Dataset data = load_runs_csv(path, o.vocab);
  for (const RunRecord& r : data.records) {
    if (table.try_find(r.gpu)) continue;
    try {
      table.find(r.gpu);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("[energy] " + path + " row " + std::to_string(r.row) + ": " +
                                  std::string(e.what()).substr(9));
    }
  }
  return data;
}

nlohmann::json physical_fit_json(const PhysicalFit& phys, const HardwareTable& table) {
  nlohmann::json j = physical_params_json(phys.params);
  j["r2_in_sample"] = phys.r2;
  j["time_r2_in_sample"] = std::isfinite(phys.time_r2) ? nlohmann::json(phys.time_r2) : nlohmann::json(nullptr);
  j["runs_with_duration"] = phys.timed;
  j["lambda_time"] = strength(phys.lambda_time);
  j["lambda_energy"] = strength(phys.lambda_energy);
  j["hardware_table"] = table.origin();
  return j;
}

nlohmann::json logo_json(const LeaveOneGpuOut& logo, std::vector<std::string>& notes) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuHeldOut& g : logo.gpus) {
    gpus.push_back({{"gpu", g.gpu},
                    {"train_n", g.train_n},
                    {"fitted", held_out_json(g.fitted)},
                    {"defaults", held_out_json(g.defaults)},
                    {"lambda_time", strength(g.lambda_time)},
                    {"lambda_energy", strength(g.lambda_energy)}});
    if (g.fitted.r2 < g.defaults.r2)
      notes.push_back("leaving out " + g.gpu + ": the fitted model scores below the defaults");
  }
  return gpus;
}

nlohmann::json logo_pooled_json(const LeaveOneGpuOut& logo) {
  return {
      {"fitted", held_out_json(logo.pooled)},
      {"defaults", held_out_json(logo.pooled_defaults)},
      {"gpus", logo.gpus.size()},
      {"interval_ln", std::isfinite(logo.interval_ln) ? nlohmann::json(logo.interval_ln) : nlohmann::json(nullptr)}};
}

// Fit on DATA only and score the other file. The test file is meant to hold other GPUs, so the
// ridge strengths come from folds that leave whole GPUs of DATA out (configuration families when
// DATA has a single GPU): a fit that does not carry over between the GPUs of DATA shrinks back
// to the defaults.
nlohmann::json test_json(const Dataset& data, const Dataset& test, const FitOptions& o, const HardwareTable& table,
                         std::vector<std::string>& notes) {
  std::set<std::string> gpus;
  for (const RunRecord& r : data.records) gpus.insert(table.find(r.gpu).key);
  const FoldBy by = gpus.size() > 1 ? FoldBy::kGpu : FoldBy::kGroup;
  const PhysicalFit across = fit_physical(data.records, table, -1, -1, by);
  std::vector<double> meas, fitted, def;
  for (const RunRecord& r : test.records) {
    meas.push_back(r.energy_kwh);
    fitted.push_back(predict_physical_kwh(r, table, across.params));
    def.push_back(predict_physical_kwh(r, table, table.params()));
  }
  const HeldOut fitted_score = score(meas, fitted), default_score = score(meas, def);
  const nlohmann::json h = held_out_json(fitted_score);
  if (fitted_score.r2 < default_score.r2) {
    notes.push_back("on " + o.test_csv + " the fitted physical model scores below the hardware-table defaults");
  }
  return {{"data", o.test_csv},
          {"test_r2", h["heldout_r2"]},
          {"test_rmse_ln", h["heldout_rmse_ln"]},
          {"test_mape", h["heldout_mape"]},
          {"n", h["n"]},
          {"folds_by", by == FoldBy::kGpu ? "gpu" : "group"},
          {"lambda_time", strength(across.lambda_time)},
          {"lambda_energy", strength(across.lambda_energy)},
          {"defaults", held_out_json(default_score)}};
}

// Held-out predictions of every run (JSON) and the points of the scatter chart.
nlohmann::json predictions_json(const Dataset& data, const CrossValidation& cv, const FitOptions& o,
                                const HardwareTable& table, std::vector<ScatterPoint>& points) {
  nlohmann::json preds = nlohmann::json::array();
  for (size_t i = 0; i < data.records.size(); ++i) {
    const RunRecord& r = data.records[i];
    const double ref = cv.reference_pred_kwh[i], phy = cv.physical_pred_kwh[i];
    nlohmann::json p = {{"row", r.row},
                        {"gpu", table.find(r.gpu).key},
                        {"group", r.group},
                        {"measured_kwh", r.energy_kwh},
                        {"physical_kwh", phy}};
    p["reference_kwh"] = std::isfinite(ref) ? nlohmann::json(ref) : nlohmann::json(nullptr);
    preds.push_back(p);
    const double shown = o.model == "reference" ? ref : phy;
    if (std::isfinite(shown)) points.push_back({r.energy_kwh, shown, table.find(r.gpu).key});
  }
  return preds;
}

// Stores the fit in the user table with the interval of later predictions: the leave-one-GPU-out
// spread when there is one (a new GPU is what the interval is for), else the held-out RMSE.
std::string save_fit(const PhysicalFit& phys, const CrossValidation& cv, const LeaveOneGpuOut* logo,
                     const Dataset& data, const FitOptions& o, const HardwareTable& table) {
  const std::string user = ensure_user_table();
  PhysicalParams saved = phys.params;
  saved.interval_ln = logo && std::isfinite(logo->interval_ln) ? logo->interval_ln : cv.physical.rmse_ln;
  FittedRange range = fitted_range(data.records, table);
  range.source = "fitted by meganeura energy fit on " + o.csv;
  write_model_params(user, saved, range, range.source);
  return user;
}

std::string output_prefix(const FitOptions& o) {
  namespace fs = std::filesystem;
  return o.out.empty() ? (fs::path(o.csv).parent_path() / fs::path(o.csv).stem()).string() + ".fit" : o.out;
}

// The evaluation the report leads with: the group-disjoint scores of --model, or the pooled
// leave-one-GPU-out scores with --leave-one-gpu-out.
void lead_scores(nlohmann::json& j, const FitOptions& o, const CrossValidation& cv, const LeaveOneGpuOut* logo) {
  const HeldOut& lead = o.leave_one_gpu_out ? logo->pooled : o.model == "reference" ? cv.reference : cv.physical;
  const nlohmann::json lead_json = held_out_json(lead);
  for (const char* k : {"heldout_r2", "heldout_rmse_ln", "heldout_mape"}) j[k] = lead_json[k];
  j["evaluation"] = o.leave_one_gpu_out ? "leave_one_gpu_out" : "group_disjoint";
}

}  // namespace

nlohmann::json run_fit(const FitOptions& o) {
  check_options(o);
  const HardwareTable table = HardwareTable::load_default(o.hardware);
  Dataset data = load_checked(o.csv, o, table);
  derive_efficiency(data);
  std::vector<std::string> notes = data.notes;
  const std::vector<RunRecord> usable = reference_usable(data.records, &notes);

  nlohmann::json j = {{"data", o.csv}, {"rows", data.records.size()}, {"model", o.model}};
  if (usable.size() > 6) {
    j["reference"] = reference_fit_json(fit_reference(usable));
  } else {
    notes.push_back("too few runs with a known efficiency to fit the reference model");
  }
  const PhysicalFit phys = fit_physical(data.records, table);
  j["physical"] = physical_fit_json(phys, table);
  j["physical_defaults"] = physical_params_json(table.params());

  const CrossValidation cv = cross_validate(data.records, table, o.folds);
  notes.insert(notes.end(), cv.notes.begin(), cv.notes.end());
  j["folds"] = cv.folds;
  j["heldout"] = {{"reference", held_out_json(cv.reference)},
                  {"physical", held_out_json(cv.physical)},
                  {"physical_defaults", held_out_json(cv.physical_default)}};

  const LeaveOneGpuOut logo = leave_one_gpu_out(data.records, table, o.min_gpu_runs);
  if (o.leave_one_gpu_out && logo.gpus.size() < 2) {
    invalid("--leave-one-gpu-out needs runs of at least two GPUs with --min-gpu-runs (" +
            std::to_string(o.min_gpu_runs) + ") runs each in " + o.csv);
  }
  j["leave_one_gpu_out"] = logo_json(logo, notes);
  j["leave_one_gpu_out_pooled"] = logo_pooled_json(logo);
  lead_scores(j, o, cv, &logo);

  if (!o.test_csv.empty()) {
    j["test"] = test_json(data, load_checked(o.test_csv, o, table), o, table, notes);
    for (const char* k : {"test_r2", "test_rmse_ln", "test_mape"}) j[k] = j["test"][k];
  }
  std::vector<ScatterPoint> points;
  j["heldout_predictions"] = predictions_json(data, cv, o, table, points);
  j["notes"] = notes;
  if (o.save) j["saved_to"] = save_fit(phys, cv, logo.gpus.empty() ? nullptr : &logo, data, o, table);

  const std::string prefix = output_prefix(o);
  j["json_path"] = prefix + ".json";
  j["svg_path"] = prefix + ".svg";
  write_text_file(
      prefix + ".svg",
      loglog_scatter_svg(points, o.model + " model, held out (" + std::to_string(cv.folds) + " group-disjoint folds)",
                         "measured energy (kWh)", "predicted energy (kWh)"));
  write_text_file(prefix + ".json", j.dump(2) + "\n");
  return j;
}

}  // namespace meganeura::energy
