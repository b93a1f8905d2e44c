// Fuzzes the energy CSV reader (measured training runs) and the efficiency derivation.
// Properties: every record that is accepted has a positive energy, at least one GPU and
// positive sizes; derived efficiencies are finite and positive.
#include <cmath>
#include <stdexcept>
#include <string>

#include "energy/dataset.h"
#include "fuzz_util.h"

using namespace meganeura;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  energy::Dataset d;
  try {
    d = energy::parse_runs_csv(text, "fuzz.csv");
  } catch (const std::runtime_error&) {
    return 0;
  }
  for (const auto& r : d.records) {
    if (!(r.energy_kwh > 0) || !std::isfinite(r.energy_kwh)) fuzz::property_failed("energy not positive");
    if (r.gpus < 1 || r.layers < 1 || r.hidden < 1) fuzz::property_failed("non-positive count");
    if (!(r.batch > 0) || !(r.tokens > 0)) fuzz::property_failed("non-positive batch or tokens");
  }
  try {
    energy::derive_efficiency(d);
  } catch (const std::runtime_error&) {
    return 0;
  }
  for (const auto& r : d.records) {
    if (r.efficiency && !(std::isfinite(*r.efficiency) && *r.efficiency > 0))
      fuzz::property_failed("efficiency not finite and positive", std::to_string(*r.efficiency));
  }
  // The cell splitter alone, on the whole text as one line.
  (void)energy::split_csv_line(text);
  return 0;
}
