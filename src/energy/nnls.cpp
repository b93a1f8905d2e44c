#include "energy/nnls.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace meganeura::energy {

NnlsResult nnls(const Eigen::MatrixXd& a, const Eigen::VectorXd& b, int max_iterations) {
  const int m = int(a.rows()), n = int(a.cols());
  NnlsResult r;
  r.x = Eigen::VectorXd::Zero(n);
  if (n == 0) return r;
  if (max_iterations <= 0) max_iterations = 3 * n + 30;
  // Gradient components below this are rounding noise of A^T r.
  const double tol = 10 * std::numeric_limits<double>::epsilon() * a.cwiseAbs().colwise().sum().maxCoeff() *
                     std::max(m, n) * std::max(1.0, b.cwiseAbs().maxCoeff());
  std::vector<bool> passive(n, false);
  Eigen::VectorXd w = a.transpose() * (b - a * r.x);
  auto solve_passive = [&](Eigen::VectorXd& z) {
    std::vector<int> cols;
    for (int j = 0; j < n; ++j) {
      if (passive[j]) cols.push_back(j);
    }
    Eigen::MatrixXd ap(m, cols.size());
    for (size_t c = 0; c < cols.size(); ++c) ap.col(c) = a.col(cols[c]);
    const Eigen::VectorXd zp = ap.colPivHouseholderQr().solve(b);
    z.setZero(n);
    for (size_t c = 0; c < cols.size(); ++c) z(cols[c]) = zp(c);
  };
  while (true) {
    int t = -1;
    double best = tol;
    for (int j = 0; j < n; ++j) {
      if (!passive[j] && w(j) > best) best = w(j), t = j;
    }
    if (t < 0) break;
    if (++r.iterations > max_iterations) {
      r.converged = false;
      break;
    }
    passive[t] = true;
    Eigen::VectorXd z;
    solve_passive(z);
    if (z(t) <= 0) {  // rounding made the entering variable useless: never pick it again this round
      passive[t] = false;
      w(t) = 0;
      continue;
    }
    // Inner loop: step towards z until it is feasible, dropping the variables that hit zero.
    while (true) {
      double alpha = std::numeric_limits<double>::infinity();
      for (int j = 0; j < n; ++j) {
        if (passive[j] && z(j) <= 0) alpha = std::min(alpha, r.x(j) / (r.x(j) - z(j)));
      }
      if (!std::isfinite(alpha)) break;
      r.x += alpha * (z - r.x);
      for (int j = 0; j < n; ++j) {
        if (passive[j] && r.x(j) <= tol * 1e-3) passive[j] = false, r.x(j) = 0;
      }
      solve_passive(z);
    }
    r.x = z;
    w = a.transpose() * (b - a * r.x);
  }
  return r;
}

}  // namespace meganeura::energy
