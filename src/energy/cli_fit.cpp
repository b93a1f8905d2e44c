#include <cmath>
#include <filesystem>
#include <set>

#include "energy/cli.h"
#include "energy/fit.h"
#include "energy/hardware.h"
#include "energy/report.h"
#include "energy/svg.h"

namespace meganeura::energy {

nlohmann::json run_fit(const FitOptions& o) {
  if (o.model != "reference" && o.model != "physical") {
    throw std::invalid_argument("[energy] unknown --model '" + o.model + "' (expected reference or physical)");
  }
  if (o.folds < 2) throw std::invalid_argument("[energy] --folds must be at least 2");
  const HardwareTable table = HardwareTable::load_default(o.hardware);
  auto load = [&](const std::string& path) {
    Dataset data = load_runs_csv(path, o.vocab);
    for (const RunRecord& r : data.records) {
      if (!table.try_find(r.gpu)) {
        try {
          table.find(r.gpu);
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument("[energy] " + path + " row " + std::to_string(r.row) + ": " +
                                      std::string(e.what()).substr(9));
        }
      }
    }
    return data;
  };
  Dataset data = load(o.csv);
  derive_efficiency(data);
  std::vector<std::string> notes = data.notes;
  const std::vector<RunRecord> usable = reference_usable(data.records, &notes);

  // An infinite ridge strength (null) keeps that half of the model at the table's defaults.
  auto strength = [](double l) { return std::isfinite(l) ? nlohmann::json(l) : nlohmann::json(nullptr); };
  nlohmann::json j;
  j["data"] = o.csv;
  j["rows"] = data.records.size();
  j["model"] = o.model;
  if (usable.size() > 6) {
    j["reference"] = reference_fit_json(fit_reference(usable));
  } else {
    notes.push_back("too few runs with a known efficiency to fit the reference model");
  }
  const PhysicalFit phys = fit_physical(data.records, table);
  j["physical"] = physical_params_json(phys.params);
  j["physical"]["r2_in_sample"] = phys.r2;
  j["physical"]["time_r2_in_sample"] =
      std::isfinite(phys.time_r2) ? nlohmann::json(phys.time_r2) : nlohmann::json(nullptr);
  j["physical"]["runs_with_duration"] = phys.timed;
  j["physical"]["lambda_time"] = strength(phys.lambda_time);
  j["physical"]["lambda_energy"] = strength(phys.lambda_energy);
  j["physical"]["hardware_table"] = table.origin();
  j["physical_defaults"] = physical_params_json(PhysicalParams::from_table(table));

  const CrossValidation cv = cross_validate(data.records, table, o.folds);
  notes.insert(notes.end(), cv.notes.begin(), cv.notes.end());
  j["folds"] = cv.folds;
  j["heldout"] = {{"reference", held_out_json(cv.reference)},
                  {"physical", held_out_json(cv.physical)},
                  {"physical_defaults", held_out_json(cv.physical_default)}};
  const HeldOut& lead = o.model == "reference" ? cv.reference : cv.physical;
  const nlohmann::json lead_json = held_out_json(lead);
  for (const char* k : {"heldout_r2", "heldout_rmse_ln", "heldout_mape"}) j[k] = lead_json[k];

  nlohmann::json logo = nlohmann::json::array();
  for (const GpuHeldOut& g : leave_one_gpu_out(data.records, table, o.min_gpu_runs)) {
    logo.push_back({{"gpu", g.gpu},
                    {"train_n", g.train_n},
                    {"fitted", held_out_json(g.fitted)},
                    {"defaults", held_out_json(g.defaults)},
                    {"lambda_time", strength(g.lambda_time)},
                    {"lambda_energy", strength(g.lambda_energy)}});
    if (g.fitted.r2 < g.defaults.r2) {
      notes.push_back("leaving out " + g.gpu + ": the fitted model scores below the defaults");
    }
  }
  j["leave_one_gpu_out"] = logo;

  if (!o.test_csv.empty()) {
    // Fit on DATA only and score the other file. The test file is meant to hold other GPUs, so
    // the ridge strengths come from folds that leave whole GPUs of DATA out (configuration
    // families when DATA has a single GPU): a fit that does not carry over between the GPUs
    // of DATA shrinks back to the defaults.
    const Dataset test = load(o.test_csv);
    std::set<std::string> gpus;
    for (const RunRecord& r : data.records) gpus.insert(table.find(r.gpu).key);
    const FoldBy by = gpus.size() > 1 ? FoldBy::kGpu : FoldBy::kGroup;
    const PhysicalFit across = fit_physical(data.records, table, -1, -1, by);
    std::vector<double> meas, fitted, def;
    const PhysicalParams defaults = PhysicalParams::from_table(table);
    for (const RunRecord& r : test.records) {
      meas.push_back(r.energy_kwh);
      fitted.push_back(predict_physical_kwh(r, table, across.params));
      def.push_back(predict_physical_kwh(r, table, defaults));
    }
    const HeldOut fitted_score = score(meas, fitted), default_score = score(meas, def);
    const nlohmann::json h = held_out_json(fitted_score);
    j["test"] = {{"data", o.test_csv},
                 {"test_r2", h["heldout_r2"]},
                 {"test_rmse_ln", h["heldout_rmse_ln"]},
                 {"test_mape", h["heldout_mape"]},
                 {"n", h["n"]},
                 {"folds_by", by == FoldBy::kGpu ? "gpu" : "group"},
                 {"lambda_time", strength(across.lambda_time)},
                 {"lambda_energy", strength(across.lambda_energy)},
                 {"defaults", held_out_json(default_score)}};
    for (const char* k : {"test_r2", "test_rmse_ln", "test_mape"}) j[k] = j["test"][k];
    if (fitted_score.r2 < default_score.r2) {
      notes.push_back("on " + o.test_csv + " the fitted physical model scores below the hardware-table defaults");
    }
  }

  nlohmann::json preds = nlohmann::json::array();
  std::vector<ScatterPoint> points;
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
  j["heldout_predictions"] = preds;
  j["notes"] = notes;

  if (o.save) {
    const std::string user = ensure_user_table();
    // The interval of later predictions is the held-out error, not the in-sample one.
    PhysicalParams saved = phys.params;
    saved.interval_ln = cv.physical.rmse_ln;
    write_model_params(user, saved.to_model_defaults(), saved.host_power_w, saved.rank_power_w,
                       "fitted by meganeura energy fit on " + o.csv);
    j["saved_to"] = user;
  }

  namespace fs = std::filesystem;
  const std::string prefix =
      o.out.empty() ? (fs::path(o.csv).parent_path() / fs::path(o.csv).stem()).string() + ".fit" : o.out;
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
