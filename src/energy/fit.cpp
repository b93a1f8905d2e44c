#include "energy/fit.h"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

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
    fail("the regressors are collinear (rank " + std::to_string(qr.rank()) + " of " +
         std::to_string(k) + "): the data does not vary enough to fit every coefficient");
  }
  const Eigen::VectorXd beta = qr.solve(Y);
  const Eigen::VectorXd e = Y - X * beta;
  const Eigen::MatrixXd bread = (X.transpose() * X).inverse();
  // HC3: each squared residual inflated by its leverage, robust for small samples.
  Eigen::MatrixXd meat = Eigen::MatrixXd::Zero(k, k);
  for (int i = 0; i < n; ++i) {
    const Eigen::RowVectorXd xi = X.row(i);
    const double h = xi * bread * xi.transpose();
    const double u = e(i) / std::max(1e-12, 1 - h);
    meat += u * u * xi.transpose() * xi;
  }
  const Eigen::MatrixXd hc3 = bread * meat * bread;
  // CR1: scores summed within clusters, with the small-sample factor G/(G-1) (n-1)/(n-k).
  std::map<std::string, Eigen::VectorXd> sums;
  for (int i = 0; i < n; ++i) {
    auto [it, fresh] = sums.try_emplace(clusters.empty() ? std::to_string(i) : clusters[i],
                                        Eigen::VectorXd::Zero(k));
    it->second += X.row(i).transpose() * e(i);
  }
  Eigen::MatrixXd cmeat = Eigen::MatrixXd::Zero(k, k);
  for (auto& [g, s] : sums) cmeat += s * s.transpose();
  const double groups = double(sums.size());
  const double scale = groups > 1 ? groups / (groups - 1) * (n - 1.0) / (n - k) : 1.0;
  const Eigen::MatrixXd cr = scale * bread * cmeat * bread;
  OlsResult r;
  const double mean = Y.mean();
  const double tss = (Y.array() - mean).square().sum();
  r.r2 = tss > 0 ? 1 - e.squaredNorm() / tss : 0;
  for (int j = 0; j < k; ++j) {
    r.beta.push_back(beta(j));
    r.se_hc3.push_back(std::sqrt(std::max(0.0, hc3(j, j))));
    r.se_cluster.push_back(std::sqrt(std::max(0.0, cr(j, j))));
  }
  return r;
}

std::vector<RunRecord> reference_usable(const std::vector<RunRecord>& records,
                                        std::vector<std::string>* skipped) {
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
  fit.clusters = int(std::set<std::string>(groups.begin(), groups.end()).size());
  return fit;
}

namespace {

// The energy terms of one record under one setting of the time-model knobs.
struct Terms {
  double idle, busy, dynamic, host_s;
};

Terms terms_for(const RunRecord& r, const HardwareTable& table, const PhysicalParams& p) {
  const PhysicalPrediction pr = predict_transformer(r.transformer(), r.parallel(), table.find(r.gpu), p);
  return {pr.idle_term_j, pr.busy_term_j, pr.dynamic_term_j, pr.host_seconds};
}

double combine(const Terms& t, const PhysicalParams& p) {
  return p.idle_scale * t.idle + p.busy_fraction * t.busy + p.dynamic_scale * t.dynamic +
         p.host_power_w * t.host_s;
}

// Non-negative least squares on relative errors: rows scaled by 1/E so that a 10 kWh run
// does not drown a 0.01 kWh one. Negative coefficients are clamped to zero and the rest refit.
std::array<double, 4> fit_scales(const std::vector<Terms>& t, const std::vector<double>& joules,
                                 const std::vector<int>& rows) {
  std::array<bool, 4> active{true, true, true, true};
  std::array<double, 4> out{};
  for (int round = 0; round < 4; ++round) {
    std::vector<int> cols;
    for (int j = 0; j < 4; ++j) {
      if (active[j]) cols.push_back(j);
    }
    Eigen::MatrixXd X(rows.size(), cols.size());
    Eigen::VectorXd y = Eigen::VectorXd::Ones(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const Terms& x = t[rows[i]];
      const double v[4] = {x.idle, x.busy, x.dynamic, x.host_s};
      for (size_t c = 0; c < cols.size(); ++c) X(i, c) = v[cols[c]] / joules[rows[i]];
    }
    const Eigen::VectorXd b = X.colPivHouseholderQr().solve(y);
    out = {};
    bool negative = false;
    for (size_t c = 0; c < cols.size(); ++c) {
      out[cols[c]] = b(c);
      if (b(c) < 0) active[cols[c]] = false, negative = true;
    }
    if (!negative) break;
    for (double& v : out) v = std::max(0.0, v);
  }
  return out;
}

struct Grid {
  std::vector<PhysicalParams> settings;
  std::vector<std::vector<Terms>> terms;  // [setting][record]
};

Grid build_grid(const std::vector<RunRecord>& records, const HardwareTable& table) {
  Grid g;
  const PhysicalParams base = PhysicalParams::from_table(table);
  for (double ce : {0.2, 0.45, 0.7}) {
    for (double launch : {5e-6, 20e-6, 60e-6}) {
      for (double step : {2e-3, 8e-3, 25e-3}) {
        for (double link : {base.link_efficiency, 0.25}) {
          PhysicalParams p = base;
          p.compute_efficiency = ce;
          p.dispatch_overhead_s = launch;
          p.step_overhead_s = step;
          p.link_efficiency = link;
          std::vector<Terms> t;
          for (const RunRecord& r : records) t.push_back(terms_for(r, table, p));
          g.settings.push_back(p);
          g.terms.push_back(std::move(t));
        }
      }
    }
  }
  return g;
}

// Picks the grid setting and scales with the least squared ln error on `rows`.
PhysicalParams fit_on(const Grid& g, const std::vector<double>& joules, const std::vector<int>& rows,
                      size_t* setting_out = nullptr) {
  double best = INFINITY;
  size_t best_s = 0;
  PhysicalParams best_p = g.settings.front();
  for (size_t s = 0; s < g.settings.size(); ++s) {
    const auto k = fit_scales(g.terms[s], joules, rows);
    PhysicalParams p = g.settings[s];
    p.idle_scale = k[0];
    p.busy_fraction = k[1];
    p.dynamic_scale = k[2];
    p.host_power_w = k[3];
    double sse = 0;
    for (int i : rows) {
      const double pred = combine(g.terms[s][i], p);
      sse += pred > 0 ? std::pow(std::log(pred / joules[i]), 2) : 1e6;
    }
    if (sse < best) best = sse, best_p = p, best_s = s;
  }
  if (setting_out) *setting_out = best_s;
  return best_p;
}

std::vector<double> joules_of(const std::vector<RunRecord>& records) {
  std::vector<double> j;
  for (const RunRecord& r : records) j.push_back(r.energy_kwh * 3.6e6);
  return j;
}

}  // namespace

double predict_physical_kwh(const RunRecord& r, const HardwareTable& table, const PhysicalParams& p) {
  return combine(terms_for(r, table, p), p) / 3.6e6;
}

PhysicalFit fit_physical(const std::vector<RunRecord>& records, const HardwareTable& table) {
  if (records.size() < 5) fail("need at least 5 runs to fit the physical model");
  const Grid g = build_grid(records, table);
  const std::vector<double> j = joules_of(records);
  std::vector<int> all(records.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = int(i);
  PhysicalFit fit;
  fit.params = fit_on(g, j, all);
  std::vector<double> meas, pred;
  for (const RunRecord& r : records) {
    meas.push_back(r.energy_kwh);
    pred.push_back(predict_physical_kwh(r, table, fit.params));
  }
  const HeldOut s = score(meas, pred);
  fit.r2 = s.r2;
  fit.params.interval_ln = s.rmse_ln;
  fit.n = int(records.size());
  return fit;
}

HeldOut score(const std::vector<double>& measured, const std::vector<double>& predicted) {
  HeldOut h;
  h.n = int(measured.size());
  if (h.n == 0) return h;
  double mean = 0;
  for (double m : measured) mean += std::log(m) / h.n;
  double sse = 0, tss = 0, ape = 0;
  for (int i = 0; i < h.n; ++i) {
    const double p = std::max(predicted[i], 1e-300);
    sse += std::pow(std::log(measured[i]) - std::log(p), 2);
    tss += std::pow(std::log(measured[i]) - mean, 2);
    ape += std::abs(p - measured[i]) / measured[i];
  }
  h.r2 = tss > 0 ? 1 - sse / tss : 0;
  h.rmse_ln = std::sqrt(sse / h.n);
  h.mape = 100 * ape / h.n;
  return h;
}

CrossValidation cross_validate(const std::vector<RunRecord>& records, const HardwareTable& table,
                               int folds) {
  std::set<std::string> group_set;
  for (const RunRecord& r : records) group_set.insert(r.group);
  const std::vector<std::string> groups(group_set.begin(), group_set.end());
  if (groups.size() < 2) fail("cross-validation needs at least two configuration families");
  CrossValidation cv;
  cv.folds = std::min<int>(folds, int(groups.size()));
  std::map<std::string, int> fold_of;
  for (size_t i = 0; i < groups.size(); ++i) fold_of[groups[i]] = int(i) % cv.folds;

  const Grid g = build_grid(records, table);
  const std::vector<double> j = joules_of(records);
  const PhysicalParams defaults = PhysicalParams::from_table(table);
  cv.reference_pred_kwh.assign(records.size(), NAN);
  cv.physical_pred_kwh.assign(records.size(), NAN);
  std::vector<double> ref_meas, ref_pred, phy_meas, phy_pred, def_pred;
  for (int f = 0; f < cv.folds; ++f) {
    std::vector<RunRecord> train_ref;
    std::vector<int> train, test;
    for (size_t i = 0; i < records.size(); ++i) {
      const bool held = fold_of[records[i].group] == f;
      (held ? test : train).push_back(int(i));
      if (!held && records[i].efficiency) train_ref.push_back(records[i]);
    }
    std::optional<ReferenceFit> ref;
    if (train_ref.size() > 6) ref = fit_reference(train_ref);
    size_t setting = 0;
    const PhysicalParams phys = fit_on(g, j, train, &setting);
    for (int i : test) {
      const RunRecord& r = records[i];
      const double pk = combine(g.terms[setting][i], phys) / 3.6e6;
      cv.physical_pred_kwh[i] = pk;
      phy_meas.push_back(r.energy_kwh);
      phy_pred.push_back(pk);
      def_pred.push_back(predict_physical_kwh(r, table, defaults));
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
  return cv;
}

}  // namespace meganeura::energy
