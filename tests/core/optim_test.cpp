// Optimizers against an independent f64 reference written from PyTorch's documented update
// rules. The loss sum(w*p) + 0.5*sum(p^2) has gradient w + p, known in closed form, so the
// reference needs no autodiff. Run in the f64 oracle: agreement to 1e-12 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "meganeura/train.h"

namespace meganeura {
namespace {

constexpr int64_t kN = 5;
using Vec = std::vector<double>;

std::vector<double> inputs_for(int64_t step) {
  Vec w(kN);
  for (int64_t i = 0; i < kN; ++i) w[size_t(i)] = std::sin(double(step * kN + i)) * 2;
  return w;
}

double schedule(const OptimizerConfig& c, int64_t t) {
  if (c.warmup_steps > 0 && t <= c.warmup_steps) return c.lr * double(t) / double(c.warmup_steps);
  if (c.total_steps > 0) {
    double prog = std::min(1.0, double(t - c.warmup_steps) / double(c.total_steps - c.warmup_steps));
    return c.min_lr + (c.lr - c.min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * prog));
  }
  return c.lr;
}

// The reference: micro-steps of `accumulation` inputs averaged, then one update.
Vec reference(const OptimizerConfig& c, Vec p, int64_t micro_steps) {
  Vec m(kN, 0), v(kN, 0), buf(kN, 0), acc(kN, 0);
  int64_t t = 0;
  for (int64_t s = 0; s < micro_steps; ++s) {
    Vec w = inputs_for(s);
    for (int64_t i = 0; i < kN; ++i) acc[size_t(i)] += w[size_t(i)] + p[size_t(i)];
    if ((s + 1) % c.accumulation) continue;
    Vec g(kN);
    for (int64_t i = 0; i < kN; ++i) g[size_t(i)] = acc[size_t(i)] / c.accumulation;
    acc.assign(kN, 0);
    if (c.clip_norm > 0) {
      double n2 = 0;
      for (double x : g) n2 += x * x;
      double coef = std::min(1.0, c.clip_norm / (std::sqrt(n2) + 1e-6));
      for (double& x : g) x *= coef;
    }
    ++t;
    const double lr = schedule(c, t);
    for (int64_t i = 0; i < kN; ++i) {
      double& pi = p[size_t(i)];
      double gi = g[size_t(i)];
      if (c.kind != OptimizerConfig::Kind::adamw) gi += c.weight_decay * pi;
      if (c.kind == OptimizerConfig::Kind::sgd) {
        if (c.momentum > 0) {
          buf[size_t(i)] = c.momentum * buf[size_t(i)] + gi;
          gi = c.nesterov ? gi + c.momentum * buf[size_t(i)] : buf[size_t(i)];
        }
        pi -= lr * gi;
        continue;
      }
      if (c.kind == OptimizerConfig::Kind::adamw) pi *= 1 - lr * c.weight_decay;
      m[size_t(i)] = c.beta1 * m[size_t(i)] + (1 - c.beta1) * gi;
      v[size_t(i)] = c.beta2 * v[size_t(i)] + (1 - c.beta2) * gi * gi;
      const double bc1 = 1 - std::pow(c.beta1, double(t)), bc2 = 1 - std::pow(c.beta2, double(t));
      pi -= lr / bc1 * m[size_t(i)] / (std::sqrt(v[size_t(i)]) / std::sqrt(bc2) + c.eps);
    }
  }
  return p;
}

Vec ours(const OptimizerConfig& c, const Vec& p0, int64_t micro_steps) {
  Trainer t(
      [](Graph& g) {
        Tensor p = g.parameter("p", {kN}, Init{Init::zeros});
        Tensor w = g.input("w", {kN});
        return sum(w * p) + sum(p * p) * 0.5;
      },
      c, SessionOptions{.device = Device::cpu, .f64_oracle = true});
  t.session().set("p", std::span<const double>(p0));
  for (int64_t s = 0; s < micro_steps; ++s) {
    Vec w = inputs_for(s);
    t.session().set("w", std::span<const double>(w));
    t.step();
  }
  EXPECT_EQ(t.updates(), micro_steps / c.accumulation);
  return t.session().get_f64("p");
}

struct OptCase {
  const char* name;
  OptimizerConfig cfg;
};

class Optim : public testing::TestWithParam<OptCase> {};

TEST_P(Optim, MatchesReference) {
  const OptimizerConfig& c = GetParam().cfg;
  Vec p0 = {0.5, -1.0, 2.0, 0.25, -0.75};
  const int64_t micro = 8 * c.accumulation;
  Vec want = reference(c, p0, micro), got = ours(c, p0, micro);
  for (int64_t i = 0; i < kN; ++i) {
    EXPECT_NEAR(got[size_t(i)], want[size_t(i)], 1e-12 * (1 + std::abs(want[size_t(i)]))) << "element " << i;
    EXPECT_NE(want[size_t(i)], p0[size_t(i)]);  // the update moved it
  }
}

OptimizerConfig make(OptimizerConfig::Kind k, double lr,
                     std::initializer_list<std::function<void(OptimizerConfig&)>> tweaks = {}) {
  OptimizerConfig c;
  c.kind = k;
  c.lr = lr;
  for (auto& f : tweaks) f(c);
  return c;
}

using K = OptimizerConfig::Kind;
INSTANTIATE_TEST_SUITE_P(
    Rules, Optim,
    testing::Values(OptCase{"sgd", make(K::sgd, 0.1)}, OptCase{"sgd_momentum_wd", make(K::sgd, 0.05, {[](auto& c) {
                                                                                         c.momentum = 0.9;
                                                                                         c.weight_decay = 0.01;
                                                                                       }})},
                    OptCase{"sgd_nesterov", make(K::sgd, 0.05, {[](auto& c) {
                                                   c.momentum = 0.8;
                                                   c.nesterov = true;
                                                 }})},
                    OptCase{"adam", make(K::adam, 0.1)},
                    OptCase{"adam_l2", make(K::adam, 0.1, {[](auto& c) { c.weight_decay = 0.1; }})},
                    OptCase{"adamw", make(K::adamw, 0.1, {[](auto& c) {
                                            c.weight_decay = 0.1;
                                            c.beta1 = 0.8;
                                            c.beta2 = 0.99;
                                          }})},
                    OptCase{"adamw_clip", make(K::adamw, 0.1, {[](auto& c) { c.clip_norm = 0.5; }})},
                    OptCase{"adamw_warmup_cosine", make(K::adamw, 0.1, {[](auto& c) {
                                                          c.warmup_steps = 3;
                                                          c.total_steps = 8;
                                                          c.min_lr = 0.01;
                                                        }})},
                    OptCase{"sgd_accumulate3", make(K::sgd, 0.1, {[](auto& c) {
                                                      c.momentum = 0.9;
                                                      c.accumulation = 3;
                                                    }})},
                    OptCase{"adamw_accumulate2_clip", make(K::adamw, 0.05, {[](auto& c) {
                                                             c.accumulation = 2;
                                                             c.clip_norm = 1;
                                                             c.weight_decay = 0.1;
                                                           }})}),
    [](const testing::TestParamInfo<OptCase>& i) { return std::string(i.param.name); });

TEST(Optim, RejectsBadConfig) {
  auto build = [](Graph& g) { return sum(g.parameter("p", {2}, Init{Init::zeros})); };
  OptimizerConfig c;
  c.lr = -1;
  EXPECT_THROW(Trainer(build, c), std::invalid_argument);
  c.lr = 0.1;
  c.beta1 = 1.0;
  EXPECT_THROW(Trainer(build, c), std::invalid_argument);
}

}  // namespace
}  // namespace meganeura

namespace meganeura {
namespace {

// Adam in strict f32 with beta2 close to 1: the bias corrections 1 - beta^t must not cancel.
// Tolerance 2e-5 relative: the f32 update itself is good to a few ulps (~1e-6); a correction
// computed in f32 is off by ~6e-3 at beta2 = 0.99999.
TEST(Optim, AdamBiasCorrectionIsAccurateInF32) {
  OptimizerConfig c = make(K::adam, 1e-3, {[](auto& c) { c.beta2 = 0.99999; }});
  const Vec p0(kN, 0.0);
  const int64_t steps = 3;
  Vec want = reference(c, p0, steps);
  Trainer t(
      [](Graph& g) {
        Tensor p = g.parameter("p", {kN}, Init{Init::zeros});
        Tensor w = g.input("w", {kN});
        return sum(w * p) + sum(p * p) * 0.5;
      },
      c, SessionOptions{});
  for (int64_t s = 0; s < steps; ++s) {
    Vec w = inputs_for(s);
    t.session().set("w", std::span<const double>(w));
    t.step();
  }
  Vec got = t.session().get_f64("p");
  for (int64_t i = 0; i < kN; ++i) {
    EXPECT_NEAR(got[size_t(i)], want[size_t(i)], 2e-5 * std::abs(want[size_t(i)])) << "element " << i;
  }
}

// The step counter stays exact past 2^24, where an f32 counter stops counting.
TEST(Optim, StepCounterIsExactPast2To24) {
  Trainer t([](Graph& g) { return sum(g.parameter("p", {2}, Init{Init::ones})); }, OptimizerConfig{}, SessionOptions{});
  const std::vector<int32_t> start = {1 << 24};
  t.session().set(kStepName, std::span<const int32_t>(start));
  t.step();
  t.step();
  EXPECT_EQ(t.session().get_f64(kStepName)[0], double((1 << 24) + 2));
  EXPECT_EQ(t.updates(), (int64_t(1) << 24) + 2);
}

}  // namespace
}  // namespace meganeura
