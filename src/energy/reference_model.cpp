#include "energy/reference_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

namespace meganeura::energy {

Strategy parse_strategy(const std::string& text) {
  std::string s = text;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "baseline" || s == "single" || s == "none" || s.empty()) return Strategy::kBaseline;
  if (s == "dp" || s == "ddp" || s == "data" || s == "data-parallel") return Strategy::kDataParallel;
  if (s == "fsdp" || s == "zero3") return Strategy::kFsdp;
  if (s == "tp" || s == "tensor" || s == "tensor-parallel") return Strategy::kTensorParallel;
  throw std::invalid_argument("[energy] unknown strategy '" + text + "' (expected baseline, dp, fsdp or tp)");
}

std::string strategy_name(Strategy s) {
  switch (s) {
    case Strategy::kBaseline: return "baseline";
    case Strategy::kDataParallel: return "dp";
    case Strategy::kFsdp: return "fsdp";
    case Strategy::kTensorParallel: return "tp";
  }
  return "baseline";
}

std::array<double, 6> ReferenceCoefficients::as_array() const {
  return {intercept, a_compute, a_memory, a_efficiency, g_fsdp, g_tp};
}

ReferenceCoefficients ReferenceCoefficients::from_array(const std::array<double, 6>& v) {
  return {v[0], v[1], v[2], v[3], v[4], v[5]};
}

ReferenceCoefficients ReferenceCoefficients::bert() {
  return {-12.69711, 0.045442, 0.419800, -1.122764, -0.292684, -0.571147};
}

namespace {

void require_positive(double v, const char* what) {
  if (!(v > 0) || !std::isfinite(v)) {
    throw std::invalid_argument(std::string("[energy] ") + what + " must be positive, got " + std::to_string(v));
  }
}

}  // namespace

double reference_compute_proxy(const ReferenceInputs& in) {
  const double d = in.hidden;
  return 20.0 * in.layers * d * d * in.tokens;
}

double reference_memory_proxy(const ReferenceInputs& in) {
  return in.batch * in.seq * static_cast<double>(in.hidden) * in.layers;
}

std::array<double, 6> reference_features(const ReferenceInputs& in) {
  require_positive(in.layers, "layers");
  require_positive(in.hidden, "hidden size");
  require_positive(in.batch, "batch size");
  require_positive(in.seq, "sequence length");
  require_positive(in.tokens, "tokens");
  if (!(in.efficiency > 0) || in.efficiency > 1.5 || !std::isfinite(in.efficiency)) {
    // Slightly super-linear speed-ups happen (caches); anything far above 1 is a typo.
    throw std::invalid_argument("[energy] parallel efficiency must be in (0, 1.5], got " +
                                std::to_string(in.efficiency));
  }
  return {1.0,
          std::log(reference_compute_proxy(in)),
          std::log(reference_memory_proxy(in)),
          std::log(in.efficiency),
          in.strategy == Strategy::kFsdp ? 1.0 : 0.0,
          in.strategy == Strategy::kTensorParallel ? 1.0 : 0.0};
}

double reference_predict_kwh(const ReferenceInputs& in, const ReferenceCoefficients& c) {
  const auto x = reference_features(in);
  const auto b = c.as_array();
  double ln_e = 0;
  for (size_t i = 0; i < x.size(); ++i) ln_e += b[i] * x[i];
  return std::exp(ln_e);
}

}  // namespace meganeura::energy
