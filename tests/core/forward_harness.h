// Shared by the forward tests that compare ops with naive f64 loops: standard-normal inputs,
// each drawn from its own seed, fed into a session, and an elementwise comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "meganeura/session.h"

namespace meganeura::forward_test {

using Vec = std::vector<double>;

inline Vec randn(int64_t n, uint64_t seed) {
  std::mt19937_64 r(seed);
  std::normal_distribution<double> d(0, 1);
  Vec v(static_cast<size_t>(n));
  for (auto& x : v) x = d(r);
  return v;
}

// |got - want| <= rel * (1 + |want|) elementwise.
inline void expect_close(const Vec& got, const Vec& want, const char* what, double rel = 2e-5) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * (1 + std::abs(want[i]))) << what << " at " << i;
  }
}

// A graph's inputs with their values: the k-th float input gets randn(seed_mul * k + seed_add).
struct Inputs {
  Inputs(uint64_t seed_mul, uint64_t seed_add) : mul_(seed_mul), add_(seed_add) {}
  Graph g;
  std::map<std::string, Vec> values;
  std::map<std::string, std::vector<int32_t>> ints;
  Tensor in(const std::string& name, Shape shape) {
    values[name] = randn(numel(shape), values.size() * mul_ + add_);
    return g.input(name, shape);
  }
  Tensor ids(const std::string& name, std::vector<int32_t> v) {
    Tensor t = g.input(name, {int64_t(v.size())}, DType::i32);
    ints[name] = std::move(v);
    return t;
  }
  // Sets every input the session kept (the planner prunes unused ones).
  void feed(Session& s) const {
    for (auto& [k, v] : values)
      if (s.buffers().count(k)) s.set(k, std::span<const double>(v));
    for (auto& [k, v] : ints)
      if (s.buffers().count(k)) s.set(k, std::span<const int32_t>(v));
  }

 private:
  uint64_t mul_, add_;
};

}  // namespace meganeura::forward_test
