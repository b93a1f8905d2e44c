// The roofline-inspired log-linear scaling model of energy for multi-GPU fine-tuning
// (arXiv 2606.23546, BERT fine-tuning on multiple GPUs):
//   ln E = b0 + aC ln C + aM ln M + aEta ln eta + gFSDP [FSDP] + gTP [TP]
// with compute C = N_p * tokens (N_p = 20 L d^2, embeddings excluded), memory
// M = B * S * d * L and parallel efficiency eta = (T_1 / T_N) / N. It is the baseline the
// physical model is compared against; its published BERT coefficients are built in.
#pragma once

#include <array>
#include <string>

namespace meganeura::energy {

enum class Strategy { kBaseline, kDataParallel, kFsdp, kTensorParallel };

// Parses "baseline"/"single", "dp"/"ddp", "fsdp", "tp" (case-insensitive); throws on others.
Strategy parse_strategy(const std::string& text);
std::string strategy_name(Strategy s);

// One training configuration as the reference model sees it.
struct ReferenceInputs {
  int layers = 0;
  int hidden = 0;
  double batch = 0;         // sequences per step (B)
  double seq = 0;           // sequence length (S)
  double tokens = 0;        // tokens seen over the run
  double efficiency = 1.0;  // eta in (0, 1]
  Strategy strategy = Strategy::kBaseline;
};

// Coefficients in absolute form (no centring applied at prediction time).
struct ReferenceCoefficients {
  double intercept = 0;
  double a_compute = 0;
  double a_memory = 0;
  double a_efficiency = 0;
  double g_fsdp = 0;
  double g_tp = 0;

  std::array<double, 6> as_array() const;
  static ReferenceCoefficients from_array(const std::array<double, 6>& v);
  // The published BERT fit.
  static ReferenceCoefficients bert();
};

// The six regressors [1, ln C, ln M, ln eta, FSDP, TP]; validates the inputs and throws
// std::invalid_argument ("[energy] ...") naming the bad one.
std::array<double, 6> reference_features(const ReferenceInputs& in);
double reference_compute_proxy(const ReferenceInputs& in);  // C
double reference_memory_proxy(const ReferenceInputs& in);   // M

// Predicted energy in kWh.
double reference_predict_kwh(const ReferenceInputs& in, const ReferenceCoefficients& c = ReferenceCoefficients::bert());

}  // namespace meganeura::energy
