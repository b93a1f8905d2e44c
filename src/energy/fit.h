// Fitting both energy models to measured runs and judging them on data they did not see.
// The reference model is ordinary least squares in ln space with HC3 and cluster-robust
// standard errors; the physical model keeps its roofline and fits the scale of its energy
// terms (and a small grid of its time-model knobs and link efficiency), never looking at
// measured run times.
// Cross-validation holds out whole configuration families so that the parallel variants of
// one workload never sit on both sides of a split.
#pragma once

#include <array>
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
};

struct PhysicalFit {
  PhysicalParams params;
  double r2 = 0;  // in-sample, ln space
  int n = 0;
};

struct HeldOut {
  double r2 = 0;        // ln space
  double rmse_ln = 0;
  double mape = 0;      // on kWh, in percent
  int n = 0;
};

struct CrossValidation {
  int folds = 0;
  HeldOut reference;
  HeldOut physical;          // refitted per fold
  HeldOut physical_default;  // hardware-table defaults, nothing fitted
  std::vector<double> reference_pred_kwh;  // held-out predictions, in record order
  std::vector<double> physical_pred_kwh;
};

// Least squares beta = argmin |y - X beta|^2 with HC3 and cluster-robust covariances.
struct OlsResult {
  std::vector<double> beta, se_hc3, se_cluster;
  double r2 = 0;
};
OlsResult ols(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
              const std::vector<std::string>& clusters);

// Records usable by the reference model (efficiency known); `skipped` collects the others.
std::vector<RunRecord> reference_usable(const std::vector<RunRecord>& records,
                                        std::vector<std::string>* skipped = nullptr);

ReferenceFit fit_reference(const std::vector<RunRecord>& records);
PhysicalFit fit_physical(const std::vector<RunRecord>& records, const HardwareTable& table);
double predict_physical_kwh(const RunRecord& r, const HardwareTable& table, const PhysicalParams& p);

// Group-disjoint k-fold cross-validation of both models on the same splits (groups are
// assigned to folds round-robin in sorted order; k = min(folds, number of groups)).
CrossValidation cross_validate(const std::vector<RunRecord>& records, const HardwareTable& table,
                               int folds = 5);

HeldOut score(const std::vector<double>& measured_kwh, const std::vector<double>& predicted_kwh);

}  // namespace meganeura::energy
