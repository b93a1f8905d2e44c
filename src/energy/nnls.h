// Non-negative least squares, min |A x - b| subject to x >= 0, by the active-set method of
// Lawson and Hanson (Solving Least Squares Problems, 1974, chapter 23): variables enter the
// passive set one at a time by the largest gradient component, and leave it when the
// unconstrained solution on the passive set would make them negative. Unlike clamping negative
// coefficients to zero, a variable that left can come back when the gradient asks for it.
#pragma once

#include <Eigen/Dense>

namespace meganeura::energy {

struct NnlsResult {
  Eigen::VectorXd x;
  int iterations = 0;
  bool converged = true;
};

NnlsResult nnls(const Eigen::MatrixXd& a, const Eigen::VectorXd& b, int max_iterations = 0);

}  // namespace meganeura::energy
