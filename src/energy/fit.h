// Fitting both energy models to measured runs and judging them on data they did not see.
// The reference model is ordinary least squares in ln space with HC3 and cluster-robust
// standard errors. The physical model is linear in its coefficients over features of the work
// (RunFeatures): its time coefficients are fitted to the measured durations of the training
// runs, when the data has them, and its power coefficients to their energies, both by
// non-negative least squares with efficiencies bounded by the datasheet (at most 1) and a ridge
// pull towards the hardware table's defaults whose strength is chosen by group-disjoint
// cross-validation inside the training runs. Predictions never read a measured time.
// Cross-validation holds out whole configuration families so that the parallel variants of
// one workload never sit on both sides of a split.
#pragma once

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "energy/dataset.h"
#include "energy/hardware.h"
#include "energy/physical_model.h"
#include "energy/reference_model.h"

namespace meganeura::energy {

struct ReferenceFit {
  ReferenceCoefficients coefficients;
  std::array<double, 6> se_hc3{};
  std::array<double, 6> se_cluster{};  // clustered by configuration family (CR1)
  double r2 = 0;                       // in-sample, ln space
  int n = 0;
  int clusters = 0;
  std::vector<std::string> warnings;
};

struct PhysicalFit {
  PhysicalParams params;
  double r2 = 0;         // in-sample, ln space
  double time_r2 = NAN;  // in-sample, ln space, of the time model (NaN: no durations)
  int n = 0;
  int timed = 0;                              // runs with a measured duration the time model was fitted to
  double lambda_time = 0, lambda_energy = 0;  // ridge strengths chosen by inner CV
};

// Scores in ln space and MAPE on kWh; NaN (reported as null) when no run was scored.
struct HeldOut {
  double r2 = NAN;
  double rmse_ln = NAN;
  double mape = NAN;  // in percent
  int n = 0;
};

struct GpuHeldOut {
  std::string gpu;
  HeldOut fitted, defaults;
  int train_n = 0;
  double lambda_time = 0, lambda_energy = 0;  // chosen by the inner GPU-disjoint folds
};

struct LeaveOneGpuOut {
  std::vector<GpuHeldOut> gpus;
  HeldOut pooled, pooled_defaults;  // over every held-out run of every GPU left out
  double interval_ln = NAN;         // 90th percentile of |ln(predicted / measured)| over those runs
};

struct CrossValidation {
  int folds = 0;
  HeldOut reference;
  HeldOut physical;                        // refitted per fold (nested choice of the ridge strength)
  HeldOut physical_default;                // hardware-table defaults, nothing fitted
  std::vector<double> reference_pred_kwh;  // held-out predictions, in record order
  std::vector<double> physical_pred_kwh;
  std::vector<std::string> notes;
};

// Least squares beta = argmin |y - X beta|^2 with HC3 and cluster-robust covariances, from the
// pivoted QR factors (no explicit inverse of X^T X).
struct OlsResult {
  std::vector<double> beta, se_hc3, se_cluster;
  double r2 = 0;
  int clusters = 0;
  std::vector<std::string> warnings;  // e.g. fewer clusters than coefficients
};
OlsResult ols(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
              const std::vector<std::string>& clusters);

// Records usable by the reference model (efficiency known); `skipped` collects the others.
std::vector<RunRecord> reference_usable(const std::vector<RunRecord>& records,
                                        std::vector<std::string>* skipped = nullptr);

ReferenceFit fit_reference(const std::vector<RunRecord>& records);

// What the folds of a cross-validation keep apart: configuration families, or whole GPUs.
enum class FoldBy { kGroup, kGpu };

// Fits the physical model; `lambda_time`/`lambda_energy` < 0 choose the ridge strengths by
// cross-validation inside `records` with folds disjoint by `by` (otherwise they are used as
// given; infinity keeps the table's defaults for that half of the model). The ridge pulls
// every coefficient towards the hardware table's default, so large strengths return the
// defaults.
PhysicalFit fit_physical(const std::vector<RunRecord>& records, const HardwareTable& table, double lambda_time = -1,
                         double lambda_energy = -1, FoldBy by = FoldBy::kGroup);
double predict_physical_kwh(const RunRecord& r, const HardwareTable& table, const PhysicalParams& p);

// Group-disjoint k-fold cross-validation of both models on the same splits (groups are
// assigned to folds round-robin in sorted order; k = min(folds, number of groups)).
CrossValidation cross_validate(const std::vector<RunRecord>& records, const HardwareTable& table, int folds = 5);

// For every GPU with at least `min_runs` runs: fit on the other GPUs, score on this one; and
// the same pooled over all of them.
LeaveOneGpuOut leave_one_gpu_out(const std::vector<RunRecord>& records, const HardwareTable& table, int min_runs = 15);

// 90th percentile of |ln(predicted / measured)|: the half-width of an interval holding 90% of
// those runs. NaN without runs.
double interval_ln_q90(const std::vector<double>& measured, const std::vector<double>& predicted);

// The range the records cover (GPUs by table key, model sizes, tokens per step, GPU counts,
// strategies), for the table's [fitted] section.
FittedRange fitted_range(const std::vector<RunRecord>& records, const HardwareTable& table);

HeldOut score(const std::vector<double>& measured_kwh, const std::vector<double>& predicted_kwh);

}  // namespace meganeura::energy
