// JSON and plain-text renderings of predictions, fits and meter readings, shared by the
// `meganeura energy` commands and the job monitor so that both report energy the same way.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "energy/fit.h"
#include "energy/meter.h"
#include "energy/physical_model.h"

namespace meganeura::energy {

// `grid_g_per_kwh` converts energy to CO2 (kg) at that grid carbon intensity.
nlohmann::json prediction_json(const PhysicalPrediction& p, double grid_g_per_kwh, bool dispatches);
nlohmann::json reading_json(const EnergyReading& r);
nlohmann::json reference_fit_json(const ReferenceFit& f);
nlohmann::json physical_params_json(const PhysicalParams& p);
nlohmann::json held_out_json(const HeldOut& h);

std::string prediction_text(const PhysicalPrediction& p, double grid_g_per_kwh);
std::string reading_text(const EnergyReading& r);

}  // namespace meganeura::energy
