#include "energy/fit.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

#include "energy/nnls.h"

namespace meganeura::energy {
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("[energy] " + what); }

}  // namespace

OlsResult ols(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
              const std::vector<std::string>& clusters) {
  const int n = int(y.size());
  if (n == 0) fail("no rows to fit");
  const int k = int(x.front().size());
  if (n <= k) fail("need more rows (" + std::to_string(n) + ") than coefficients (" + std::to_string(k) + ")");
  Eigen::MatrixXd X(n, k);
  Eigen::VectorXd Y(n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < k; ++j) X(i, j) = x[i][j];
    Y(i) = y[i];
  }
  Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(X);
  if (qr.rank() < k) {
    fail("the regressors are collinear (rank " + std::to_string(qr.rank()) + " of " + std::to_string(k) +
         "): the data does not vary enough to fit every coefficient");
  }
  const Eigen::VectorXd beta = qr.solve(Y);
  const Eigen::VectorXd e = Y - X * beta;
  // X P = Q R: with Q1 the thin Q, (X^T X)^-1 X^T W X (X^T X)^-1 = P R^-1 (Q1^T W Q1) R^-T P^T
  // and the leverages are the squared row norms of Q1, so no inverse of X^T X is formed.
  const Eigen::MatrixXd q1 = qr.householderQ() * Eigen::MatrixXd::Identity(n, k);
  const Eigen::MatrixXd r = qr.matrixR().topLeftCorner(k, k).triangularView<Eigen::Upper>();
  auto sandwich = [&](const Eigen::MatrixXd& s) {
    const Eigen::MatrixXd a = r.triangularView<Eigen::Upper>().solve(s);                               // R^-1 S
    const Eigen::MatrixXd v = r.triangularView<Eigen::Upper>().solve(Eigen::MatrixXd(a.transpose()));  // R^-1 S R^-T
    return Eigen::MatrixXd(qr.colsPermutation() * v * qr.colsPermutation().transpose());
  };
  // HC3: each squared residual inflated by its leverage, robust for small samples.
  Eigen::MatrixXd meat = Eigen::MatrixXd::Zero(k, k);
  for (int i = 0; i < n; ++i) {
    const Eigen::VectorXd qi = q1.row(i).transpose();
    const double u = e(i) / std::max(1e-12, 1 - qi.squaredNorm());
    meat += u * u * qi * qi.transpose();
  }
  const Eigen::MatrixXd hc3 = sandwich(meat);
  // CR1: scores summed within clusters, with the small-sample factor G/(G-1) (n-1)/(n-k).
  std::map<std::string, Eigen::VectorXd> sums;
  for (int i = 0; i < n; ++i) {
    auto [it, fresh] = sums.try_emplace(clusters.empty() ? std::to_string(i) : clusters[i], Eigen::VectorXd::Zero(k));
    it->second += q1.row(i).transpose() * e(i);
  }
  Eigen::MatrixXd cmeat = Eigen::MatrixXd::Zero(k, k);
  for (auto& [g, s] : sums) cmeat += s * s.transpose();
  const double groups = double(sums.size());
  const double scale = groups > 1 ? groups / (groups - 1) * (n - 1.0) / (n - k) : 1.0;
  const Eigen::MatrixXd cr = scale * sandwich(cmeat);
  OlsResult res;
  res.clusters = int(sums.size());
  if (res.clusters < k) {
    // With fewer clusters than coefficients the cluster score covariance is rank deficient: the
    // errors come out near zero or meaningless, however good they look.
    res.warnings.push_back("only " + std::to_string(res.clusters) + " clusters for " + std::to_string(k) +
                           " coefficients: the cluster-robust standard errors are unreliable");
  }
  const double mean = Y.mean();
  const double tss = (Y.array() - mean).square().sum();
  res.r2 = tss > 0 ? 1 - e.squaredNorm() / tss : 0;
  for (int j = 0; j < k; ++j) {
    res.beta.push_back(beta(j));
    res.se_hc3.push_back(std::sqrt(std::max(0.0, hc3(j, j))));
    res.se_cluster.push_back(std::sqrt(std::max(0.0, cr(j, j))));
  }
  return res;
}

std::vector<RunRecord> reference_usable(const std::vector<RunRecord>& records, std::vector<std::string>* skipped) {
  std::vector<RunRecord> out;
  for (const RunRecord& r : records) {
    if (r.efficiency) {
      out.push_back(r);
    } else if (skipped) {
      skipped->push_back("row " + std::to_string(r.row) +
                         ": no efficiency column and no single-GPU run of the same configuration "
                         "to derive it; left out of the reference model");
    }
  }
  return out;
}

ReferenceFit fit_reference(const std::vector<RunRecord>& records) {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  std::vector<std::string> groups;
  bool any_eta = false, any_fsdp = false, any_tp = false;
  for (const RunRecord& r : records) {
    if (!r.efficiency) fail("row " + std::to_string(r.row) + " has no parallel efficiency");
    any_eta |= std::abs(std::log(*r.efficiency)) > 1e-12;
    any_fsdp |= r.strategy == Strategy::kFsdp;
    any_tp |= r.strategy == Strategy::kTensorParallel;
  }
  for (const RunRecord& r : records) {
    const auto f = reference_features(r.reference_inputs());
    // A term the data never varies (single-GPU runs only, a strategy absent) has no
    // coefficient to estimate: it is fixed at zero.
    std::vector<double> row(f.begin(), f.begin() + 3);
    if (any_eta) row.push_back(f[3]);
    if (any_fsdp) row.push_back(f[4]);
    if (any_tp) row.push_back(f[5]);
    x.push_back(row);
    y.push_back(std::log(r.energy_kwh));
    groups.push_back(r.group);
  }
  const OlsResult o = ols(x, y, groups);
  ReferenceFit fit;
  std::array<double, 6> b{}, se3{}, sec{};
  size_t next = 0;
  for (int j = 0; j < 6; ++j) {
    if ((j == 3 && !any_eta) || (j == 4 && !any_fsdp) || (j == 5 && !any_tp)) continue;
    b[j] = o.beta[next], se3[j] = o.se_hc3[next], sec[j] = o.se_cluster[next];
    ++next;
  }
  fit.coefficients = ReferenceCoefficients::from_array(b);
  fit.se_hc3 = se3;
  fit.se_cluster = sec;
  fit.r2 = o.r2;
  fit.n = int(records.size());
  fit.clusters = o.clusters;
  fit.warnings = o.warnings;
  return fit;
}

namespace {

// The physical model is linear in ten time coefficients over time features, and, given the
// time, linear in six power coefficients over energy features (see physical_model.h).
constexpr int kTime = 10, kEnergy = 6;
using TimeVec = std::array<double, kTime>;
using EnergyVec = std::array<double, kEnergy>;

// Efficiencies are bounded by the datasheet: 1/efficiency >= 1 for compute, memory and link.
constexpr TimeVec kTimeLower = {0, 0, 0, 0, 1, 1, 0, 1, 0, 0};
constexpr std::array<bool, kTime> kBusy = {false, false, false, false, true, true, true, true, false, false};
// Ridge strengths tried by the inner cross-validation; infinity keeps the defaults exactly, so
// a fit that does not carry over to the inner held-out folds shrinks all the way back to them.
constexpr double kLambdas[] = {1e-4, 1e-2, 1, 100, 1e4, INFINITY};

struct Design {
  RunFeatures f;
  TimeVec g{};
  double joules = 0;
  std::optional<double> seconds;
  std::string group;
  std::string gpu;  // hardware-table key
};

TimeVec time_features(const RunFeatures& f) {
  return {1.0,
          f.steps,
          f.steps * f.dispatches,
          f.steps * f.optimizer_tensors,
          f.steps * f.compute_s,
          f.steps * f.memory_s,
          f.steps * f.comm_sharded_s,
          f.steps * f.comm_tp_s,
          f.steps * f.collectives,
          f.steps * f.sharded_ops};
}

TimeVec time_coefficients(const PhysicalParams& p) {
  return {p.startup_s,
          p.step_overhead_s,
          p.dispatch_overhead_s,
          p.optimizer_tensor_s,
          1 / p.compute_efficiency,
          1 / p.memory_efficiency,
          (1 - p.comm_overlap) / p.link_efficiency,
          1 / p.link_efficiency,
          p.link_latency_s,
          p.sharded_op_s};
}

void set_time(PhysicalParams& p, const TimeVec& t) {
  p.startup_s = t[0];
  p.step_overhead_s = t[1];
  p.dispatch_overhead_s = t[2];
  p.optimizer_tensor_s = t[3];
  p.compute_efficiency = 1 / t[4];
  p.memory_efficiency = 1 / t[5];
  p.link_efficiency = 1 / t[7];
  p.comm_overlap = 1 - t[6] / t[7];  // below 0: DP/FSDP collectives cost more than their link time
  p.link_latency_s = t[8];
  p.sharded_op_s = t[9];
}

EnergyVec energy_coefficients(const PhysicalParams& p) {
  return {p.idle_scale, p.busy_fraction, p.fixed_power_fraction, p.dynamic_scale, p.host_power_w, p.rank_power_w};
}

void set_energy(PhysicalParams& p, const EnergyVec& e) {
  p.idle_scale = e[0];
  p.busy_fraction = e[1];
  p.fixed_power_fraction = e[2];
  p.dynamic_scale = e[3];
  p.host_power_w = e[4];
  p.rank_power_w = e[5];
}

EnergyVec energy_features(const Design& d, const TimeVec& tau) {
  double busy = 0, fixed = 0;
  // Compute time draws its busy power at the run's power limit (1 at the default limit).
  for (int k = 0; k < kTime; ++k) (kBusy[k] ? busy : fixed) += tau[k] * d.g[k] * (k == 4 ? d.f.compute_power_scale : 1);
  const RunFeatures& f = d.f;
  const double n = f.gpus, t = busy + fixed;
  return {n * f.idle_w * t,
          n * f.dynamic_w * busy,
          n * f.dynamic_w * fixed,
          n * f.steps * (f.e_flop * f.flops + f.e_byte * f.bytes),
          f.nodes * t,
          n * t};
}

// min sum_i (w_i (x_i . c - y_i))^2 + lambda m sum_k ((c_k - d_k) / d_k)^2 subject to c >= lower:
// columns scaled by the defaults d so the ridge pulls every coefficient towards its default on
// the same footing, the bound shifted into the target, then non-negative least squares.
template <size_t K>
std::array<double, K> ridge_nnls(const std::vector<std::array<double, K>>& x, const std::vector<double>& y,
                                 const std::vector<double>& w, std::array<double, K> d,
                                 const std::array<double, K>& lower, double lambda) {
  const int m = int(x.size()), k = int(K);
  for (size_t j = 0; j < K; ++j) d[j] = std::max(d[j], lower[j] > 0 ? lower[j] : 1e-9);
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(m + k, k);
  Eigen::VectorXd b(m + k);
  for (int i = 0; i < m; ++i) {
    double shift = 0;
    for (int j = 0; j < k; ++j) {
      a(i, j) = w[i] * x[i][j] * d[j];
      shift += x[i][j] * lower[j];
    }
    b(i) = w[i] * (y[i] - shift);
  }
  const double ridge = std::sqrt(lambda * m);
  for (int j = 0; j < k; ++j) {
    a(m + j, j) = ridge;
    b(m + j) = ridge * (1 - lower[j] / d[j]);
  }
  const Eigen::VectorXd u = nnls(a, b).x;
  std::array<double, K> c{};
  for (int j = 0; j < k; ++j) c[j] = lower[j] + d[j] * u(j);
  return c;
}

// Relative errors first (rows weighted 1/y), then weights 1/sqrt(y pred): a few reweighted
// passes approach least squares in ln space, which treats over- and under-prediction alike.
template <size_t K>
std::array<double, K> fit_relative(const std::vector<std::array<double, K>>& x, const std::vector<double>& y,
                                   const std::array<double, K>& defaults, const std::array<double, K>& lower,
                                   double lambda) {
  std::vector<double> w(y.size());
  for (size_t i = 0; i < y.size(); ++i) w[i] = 1 / y[i];
  std::array<double, K> c = ridge_nnls(x, y, w, defaults, lower, lambda);
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t i = 0; i < y.size(); ++i) {
      double pred = 0;
      for (size_t j = 0; j < K; ++j) pred += x[i][j] * c[j];
      w[i] = 1 / std::sqrt(y[i] * std::max(pred, 1e-3 * y[i]));
    }
    c = ridge_nnls(x, y, w, defaults, lower, lambda);
  }
  return c;
}

std::vector<Design> designs_of(const std::vector<RunRecord>& records, const HardwareTable& table) {
  std::vector<Design> out;
  for (const RunRecord& r : records) {
    Design d;
    try {
      d.f = transformer_features(r.transformer(), r.parallel(), table.find(r.gpu));
    } catch (const std::invalid_argument& e) {
      // A run's own values (its power limit, its shape) name the row they came from.
      throw std::invalid_argument(std::string(e.what()) + " (data row " + std::to_string(r.row) + ")");
    }
    d.g = time_features(d.f);
    d.joules = r.energy_kwh * 3.6e6;
    d.seconds = r.duration_s;
    d.group = r.group;
    d.gpu = table.find(r.gpu).key;
    out.push_back(d);
  }
  return out;
}

double predict_j(const Design& d, const PhysicalParams& p) {
  double j = 0;
  for (const Term& t : energy_breakdown(d.f, p, time_breakdown(d.f, p))) j += t.value;
  return j;
}

struct FitDetail {
  PhysicalParams params;
  int timed = 0;
};

FitDetail fit_on(const std::vector<Design>& d, const std::vector<int>& rows, const PhysicalParams& defaults,
                 double lambda_time, double lambda_energy) {
  FitDetail out;
  out.params = defaults;
  TimeVec tau = time_coefficients(defaults);
  std::vector<TimeVec> xt;
  std::vector<double> yt;
  for (int i : rows) {
    if (d[i].seconds) xt.push_back(d[i].g), yt.push_back(*d[i].seconds);
  }
  out.timed = int(xt.size());
  // Measured durations of the training runs teach the time coefficients; predictions never
  // read one. Without durations the time model keeps its defaults.
  if (xt.size() >= 5 && std::isfinite(lambda_time)) {
    tau = fit_relative(xt, yt, tau, kTimeLower, lambda_time);
    set_time(out.params, tau);
  }
  std::vector<EnergyVec> xe;
  std::vector<double> ye;
  for (int i : rows) xe.push_back(energy_features(d[i], tau)), ye.push_back(d[i].joules);
  if (std::isfinite(lambda_energy)) {
    set_energy(out.params, fit_relative(xe, ye, energy_coefficients(defaults), EnergyVec{}, lambda_energy));
  }
  return out;
}

const std::string& key_of(const Design& d, FoldBy by) { return by == FoldBy::kGpu ? d.gpu : d.group; }

// Disjoint folds over `rows` by configuration family or by GPU: keys sorted, assigned
// round-robin.
std::vector<std::vector<int>> group_folds(const std::vector<Design>& d, const std::vector<int>& rows, int folds,
                                          FoldBy by = FoldBy::kGroup) {
  std::set<std::string> set;
  for (int i : rows) set.insert(key_of(d[i], by));
  const std::vector<std::string> groups(set.begin(), set.end());
  const int k = std::min<int>(folds, int(groups.size()));
  std::map<std::string, int> fold_of;
  for (size_t i = 0; i < groups.size(); ++i) fold_of[groups[i]] = int(i) % std::max(k, 1);
  std::vector<std::vector<int>> out(std::max(k, 1));
  for (int i : rows) out[fold_of[key_of(d[i], by)]].push_back(i);
  return out;
}

// Ridge strengths by cross-validation inside `rows` (the inner loop of nested CV), its folds
// disjoint in the same key as the outer evaluation: configuration families, or GPUs (every
// training GPU left out in turn). The criterion is the worst inner fold's relative regret
// against the defaults (its mean squared ln error over theirs, minus one), so a pair of
// strengths is chosen only if its fit beats the defaults on every inner held-out fold, a GPU
// with few runs counting as much as one with many; otherwise the defaults are kept (both
// strengths infinite), as they are without two keys to split on.
std::pair<double, double> choose_lambdas(const std::vector<Design>& d, const std::vector<int>& rows,
                                         const PhysicalParams& defaults, FoldBy by) {
  const auto folds = group_folds(d, rows, by == FoldBy::kGpu ? 1 << 20 : 4, by);
  if (folds.size() < 2) return {INFINITY, INFINITY};
  // Mean squared ln error of each inner held-out fold for one pair of strengths.
  auto fold_errors = [&](double lt, double le) {
    std::vector<double> mse;
    for (size_t f = 0; f < folds.size(); ++f) {
      std::vector<int> train;
      for (size_t g = 0; g < folds.size(); ++g) {
        if (g != f) train.insert(train.end(), folds[g].begin(), folds[g].end());
      }
      const PhysicalParams p = fit_on(d, train, defaults, lt, le).params;
      double sse = 0;
      for (int i : folds[f]) {
        const double pred = predict_j(d[i], p);
        sse += pred > 0 ? std::pow(std::log(pred / d[i].joules), 2) : 1e6;
      }
      mse.push_back(sse / double(folds[f].size()));
    }
    return mse;
  };
  const std::vector<double> base = fold_errors(INFINITY, INFINITY);
  // A fit must cut every inner fold's error by at least 1% to be chosen over the defaults: a
  // smaller gain on the training GPUs is within what moves either way on an unseen one.
  double best = -0.01;
  std::pair<double, double> choice{INFINITY, INFINITY};
  // From the strongest pull down, so that a tie keeps the pair closer to the defaults.
  for (auto lt = std::rbegin(kLambdas); lt != std::rend(kLambdas); ++lt) {
    for (auto le = std::rbegin(kLambdas); le != std::rend(kLambdas); ++le) {
      const std::vector<double> mse = fold_errors(*lt, *le);
      double crit = -INFINITY;
      for (size_t f = 0; f < mse.size(); ++f) crit = std::max(crit, (mse[f] - base[f]) / std::max(base[f], 1e-12));
      if (crit < best) best = crit, choice = {*lt, *le};
    }
  }
  return choice;
}

PhysicalParams fit_nested(const std::vector<Design>& d, const std::vector<int>& rows, const PhysicalParams& defaults,
                          FoldBy by) {
  const auto [lt, le] = choose_lambdas(d, rows, defaults, by);
  return fit_on(d, rows, defaults, lt, le).params;
}

}  // namespace

double predict_physical_kwh(const RunRecord& r, const HardwareTable& table, const PhysicalParams& p) {
  return predict_transformer(r.transformer(), r.parallel(), table.find(r.gpu), p).kwh;
}

PhysicalFit fit_physical(const std::vector<RunRecord>& records, const HardwareTable& table, double lambda_time,
                         double lambda_energy, FoldBy by) {
  if (records.size() < 5) fail("need at least 5 runs to fit the physical model");
  const std::vector<Design> d = designs_of(records, table);
  std::vector<int> all(records.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = int(i);
  const PhysicalParams defaults = table.params();
  if (lambda_time < 0 || lambda_energy < 0) std::tie(lambda_time, lambda_energy) = choose_lambdas(d, all, defaults, by);
  const FitDetail fd = fit_on(d, all, defaults, lambda_time, lambda_energy);
  PhysicalFit fit;
  fit.params = fd.params;
  fit.timed = fd.timed;
  fit.lambda_time = lambda_time;
  fit.lambda_energy = lambda_energy;
  std::vector<double> meas, pred, tm, tp;
  for (const Design& x : d) {
    meas.push_back(x.joules);
    pred.push_back(predict_j(x, fit.params));
    if (x.seconds) tm.push_back(*x.seconds), tp.push_back(time_breakdown(x.f, fit.params).total());
  }
  const HeldOut s = score(meas, pred);
  fit.r2 = s.r2;
  if (!tm.empty()) fit.time_r2 = score(tm, tp).r2;
  fit.params.interval_ln = s.rmse_ln;
  fit.n = int(records.size());
  return fit;
}

HeldOut score(const std::vector<double>& measured, const std::vector<double>& predicted) {
  HeldOut h;
  h.n = int(measured.size());
  if (h.n == 0) return h;  // nothing scored: NaN, never a perfect-looking 0
  double mean = 0;
  for (double m : measured) mean += std::log(m) / h.n;
  double sse = 0, tss = 0, ape = 0;
  for (int i = 0; i < h.n; ++i) {
    const double p = std::max(predicted[i], 1e-300);
    sse += std::pow(std::log(measured[i]) - std::log(p), 2);
    tss += std::pow(std::log(measured[i]) - mean, 2);
    ape += std::abs(p - measured[i]) / measured[i];
  }
  h.r2 = tss > 0 ? 1 - sse / tss : NAN;
  h.rmse_ln = std::sqrt(sse / h.n);
  h.mape = 100 * ape / h.n;
  return h;
}

CrossValidation cross_validate(const std::vector<RunRecord>& records, const HardwareTable& table, int folds) {
  const std::vector<Design> d = designs_of(records, table);
  std::vector<int> all(records.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = int(i);
  const auto split = group_folds(d, all, folds);
  if (split.size() < 2) fail("cross-validation needs at least two configuration families");
  CrossValidation cv;
  cv.folds = int(split.size());
  const PhysicalParams defaults = table.params();
  cv.reference_pred_kwh.assign(records.size(), NAN);
  cv.physical_pred_kwh.assign(records.size(), NAN);
  std::vector<double> ref_meas, ref_pred, phy_meas, phy_pred, def_pred;
  for (int f = 0; f < cv.folds; ++f) {
    std::vector<RunRecord> train_ref;
    std::vector<int> train;
    for (int g = 0; g < cv.folds; ++g) {
      if (g != f) train.insert(train.end(), split[g].begin(), split[g].end());
    }
    for (int i : train) {
      if (records[i].efficiency) train_ref.push_back(records[i]);
    }
    std::optional<ReferenceFit> ref;
    if (train_ref.size() > 6) {
      ref = fit_reference(train_ref);
    } else {
      cv.notes.push_back("fold " + std::to_string(f + 1) +
                         ": too few training runs with a known efficiency "
                         "to fit the reference model; its held-out runs are not scored for it");
    }
    const PhysicalParams phys = fit_nested(d, train, defaults, FoldBy::kGroup);
    for (int i : split[f]) {
      const RunRecord& r = records[i];
      const double pk = predict_j(d[i], phys) / 3.6e6;
      cv.physical_pred_kwh[i] = pk;
      phy_meas.push_back(r.energy_kwh);
      phy_pred.push_back(pk);
      def_pred.push_back(predict_j(d[i], defaults) / 3.6e6);
      if (ref && r.efficiency) {
        const double rp = reference_predict_kwh(r.reference_inputs(), ref->coefficients);
        cv.reference_pred_kwh[i] = rp;
        ref_meas.push_back(r.energy_kwh);
        ref_pred.push_back(rp);
      }
    }
  }
  cv.reference = score(ref_meas, ref_pred);
  cv.physical = score(phy_meas, phy_pred);
  cv.physical_default = score(phy_meas, def_pred);
  if (cv.physical.r2 < cv.physical_default.r2) {
    cv.notes.push_back("the fitted physical model scores below the hardware-table defaults held out");
  }
  return cv;
}

namespace {

// Fits on every GPU but `gpu` and scores `test` (that GPU's runs); appends the held-out energies.
GpuHeldOut hold_out_gpu(const std::vector<Design>& d, const std::string& gpu, const std::vector<int>& test,
                        const std::vector<int>& train, const PhysicalParams& defaults, std::vector<double>& meas,
                        std::vector<double>& fitted, std::vector<double>& def) {
  const auto [lt, le] = choose_lambdas(d, train, defaults, FoldBy::kGpu);
  const PhysicalParams p = fit_on(d, train, defaults, lt, le).params;
  std::vector<double> m, f, e;
  for (int i : test) {
    m.push_back(d[i].joules);
    f.push_back(predict_j(d[i], p));
    e.push_back(predict_j(d[i], defaults));
  }
  meas.insert(meas.end(), m.begin(), m.end());
  fitted.insert(fitted.end(), f.begin(), f.end());
  def.insert(def.end(), e.begin(), e.end());
  return {gpu, score(m, f), score(m, e), int(train.size()), lt, le};
}

}  // namespace

LeaveOneGpuOut leave_one_gpu_out(const std::vector<RunRecord>& records, const HardwareTable& table, int min_runs) {
  const std::vector<Design> d = designs_of(records, table);
  std::map<std::string, std::vector<int>> by_gpu;
  for (size_t i = 0; i < records.size(); ++i) by_gpu[d[i].gpu].push_back(int(i));
  const PhysicalParams& defaults = table.params();
  LeaveOneGpuOut out;
  std::vector<double> meas, fitted, def;
  for (const auto& [gpu, test] : by_gpu) {
    if (int(test.size()) < min_runs) continue;
    std::vector<int> train;
    for (const auto& [other, rows] : by_gpu) {
      if (other != gpu) train.insert(train.end(), rows.begin(), rows.end());
    }
    if (train.size() < 5) continue;
    out.gpus.push_back(hold_out_gpu(d, gpu, test, train, defaults, meas, fitted, def));
  }
  out.pooled = score(meas, fitted);
  out.pooled_defaults = score(meas, def);
  out.interval_ln = interval_ln_q90(meas, fitted);
  return out;
}

double interval_ln_q90(const std::vector<double>& measured, const std::vector<double>& predicted) {
  std::vector<double> r;
  for (size_t i = 0; i < measured.size(); ++i) {
    r.push_back(std::abs(std::log(std::max(predicted[i], 1e-300) / measured[i])));
  }
  if (r.empty()) return NAN;
  std::sort(r.begin(), r.end());
  // Linear interpolation between order statistics, as numpy's default quantile.
  const double pos = 0.9 * double(r.size() - 1);
  const size_t lo = size_t(pos);
  const double frac = pos - double(lo);
  return lo + 1 < r.size() ? r[lo] * (1 - frac) + r[lo + 1] * frac : r[lo];
}

FittedRange fitted_range(const std::vector<RunRecord>& records, const HardwareTable& table) {
  FittedRange r;
  std::set<std::string> gpus, strategies;
  bool first = true;
  for (const RunRecord& x : records) {
    const TransformerConfig c = x.transformer().resolved();
    const double params = model_parameters(c), tokens = c.batch * c.seq;
    gpus.insert(table.find(x.gpu).key);
    strategies.insert(strategy_name(x.strategy));
    r.min_parameters = first ? params : std::min(r.min_parameters, params);
    r.max_parameters = first ? params : std::max(r.max_parameters, params);
    r.min_tokens_per_step = first ? tokens : std::min(r.min_tokens_per_step, tokens);
    r.max_tokens_per_step = first ? tokens : std::max(r.max_tokens_per_step, tokens);
    r.min_gpus = first ? x.gpus : std::min(r.min_gpus, x.gpus);
    r.max_gpus = first ? x.gpus : std::max(r.max_gpus, x.gpus);
    first = false;
  }
  r.gpus.assign(gpus.begin(), gpus.end());
  r.strategies.assign(strategies.begin(), strategies.end());
  return r;
}

}  // namespace meganeura::energy
