#include <cmath>
#include <random>

#include "meganeura/models.h"

namespace meganeura::models {

Tensor mlp(Graph& g, Tensor x, const MlpConfig& c) {
  Tensor h = x;
  int64_t width = c.inputs;
  for (int64_t i = 0; i <= c.layers; ++i) {
    const bool last = i == c.layers;
    const int64_t out = last ? c.classes : c.hidden;
    const std::string p = "mlp." + std::to_string(i);
    // He initialisation for ReLU layers.
    Tensor w = g.parameter(p + ".weight", {width, out}, Init{Init::normal, std::sqrt(2.0 / double(width))});
    Tensor b = g.parameter(p + ".bias", {out}, Init{Init::zeros});
    h = matmul(h, w) + b;
    if (!last) h = relu(h);
    width = out;
  }
  return h;
}

Classification synthetic_classification(const MlpConfig& c, int64_t n, int split, uint64_t seed) {
  std::mt19937_64 centers_rng(seed);
  std::normal_distribution<double> unit(0, 1);
  std::vector<double> centers(size_t(c.classes * c.inputs));
  for (auto& v : centers) v = 1.1 * unit(centers_rng);
  std::mt19937_64 rng(seed * 7919 + 1 + uint64_t(split));
  Classification d;
  d.n = n;
  d.x.resize(size_t(n * c.inputs));
  d.y.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t k = int32_t(rng() % uint64_t(c.classes));
    d.y[size_t(i)] = k;
    for (int64_t j = 0; j < c.inputs; ++j) {
      const double v = centers[size_t(k * c.inputs + j)] + 0.6 * unit(rng);
      d.x[size_t(i * c.inputs + j)] = float(v + 0.5 * std::sin(2.5 * v));  // a fixed warp
    }
  }
  return d;
}

}  // namespace meganeura::models
