// Gradient checks for every op of the op table: autodiff in the f64 oracle against central
// finite differences, with the op placed mid-graph (its output is weighted by a fixed,
// non-uniform tensor before the sum, so a rule that ignores its upstream gradient fails).
// The f32 forward is compared with the f64 oracle too.
//
// Tolerances: with h = 1e-6 in f64 the central difference has truncation error ~h^2*|f'''| and
// round-off ~1e-16*|f|/h ~ 1e-9 for |f| ~ 10, so |ad - fd| <= 1e-6 + 1e-5*|fd| leaves two orders
// of magnitude of margin. The f32 forward agrees with f64 within 1e-4 relative (f32 epsilon
// 1.2e-7 times accumulation lengths of at most a few hundred here).
// Kinks (relu, abs, max, pooling, sign) are avoided by drawing inputs at least 0.05 away from
// them and keeping candidate maxima 0.05 apart, far beyond h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>

#include "graph/op_table.h"
#include "meganeura/autodiff.h"
#include "meganeura/session.h"
#include "op_cases.h"

namespace meganeura {
namespace {

using op_cases::away_from_zero;
using op_cases::Case;
using op_cases::distinct;
using op_cases::P;
using op_cases::positive;

// The op table's cases (shared with the Vulkan parity test) that have gradients.
std::vector<Case> cases() {
  std::vector<Case> c;
  for (Case& k : op_cases::cases()) {
    if (!k.forward_only) c.push_back(std::move(k));
  }
  return c;
}

struct Result {
  double max_err = 0;
  size_t checked = 0;
};

// Builds the case with a weighted-sum head, and returns the graph plus parameter names.
Result check(const Case& k) {
  Graph g;
  Tensor y = k.build(g);
  std::mt19937 wrng(7);
  std::vector<double> w(size_t(y.type().numel()));
  for (auto& v : w) v = std::uniform_real_distribution<double>(0.5, 1.5)(wrng) * (wrng() & 1 ? 1 : -1);
  Tensor loss = sum(y * g.constant(w, y.shape()));
  g.output("loss", loss);
  g.output("out", y);
  std::vector<Tensor> params;
  for (NodeId id : g.parameters()) params.push_back(g.tensor(id));
  auto grads = grad(loss, params);
  for (size_t i = 0; i < params.size(); ++i) g.output("grad." + g.node(params[i].id).name, grads[i]);

  Session oracle(SessionOptions{.device = Device::cpu, .f64_oracle = true, .seed = 1});
  Session strict(SessionOptions{.device = Device::cpu, .seed = 1});
  oracle.add(g);
  strict.add(g);
  std::mt19937 rng(11);
  std::map<std::string, std::vector<double>> values;
  for (const Tensor& p : params) {
    const std::string& name = g.node(p.id).name;
    std::vector<double> v(size_t(p.type().numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = k.value ? k.value(name, int64_t(i), rng) : std::normal_distribution<double>(0, 1)(rng);
    }
    values[name] = v;
    oracle.set(name, std::span<const double>(v));
    strict.set(name, std::span<const double>(v));
  }
  for (auto& [name, ids] : k.int_inputs) {
    oracle.set(name, std::span<const int32_t>(ids));
    strict.set(name, std::span<const int32_t>(ids));
  }
  oracle.run();
  strict.run();
  Result r;
  auto y64 = oracle.get_f64("out");
  auto y32 = strict.get_f64("out");
  for (size_t i = 0; i < y64.size(); ++i) {
    EXPECT_NEAR(y32[i], y64[i], 1e-4 * (1 + std::abs(y64[i]))) << k.name << ": f32 forward differs at " << i;
  }
  const double h = 1e-6;
  for (const Tensor& p : params) {
    const std::string& name = g.node(p.id).name;
    oracle.run();
    auto ad = oracle.get_f64("grad." + name);
    auto v = values[name];
    for (size_t i = 0; i < v.size(); ++i) {
      double fd = 0;
      if (!k.zero_grad) {
        auto at = [&](double x) {
          v[i] = x;
          oracle.set(name, std::span<const double>(v));
          oracle.run();
          return oracle.get_f64("loss")[0];
        };
        const double x0 = values[name][i];
        fd = (at(x0 + h) - at(x0 - h)) / (2 * h);
        v[i] = x0;
        oracle.set(name, std::span<const double>(v));
      }
      double err = std::abs(ad[i] - fd);
      r.max_err = std::max(r.max_err, err / (1 + std::abs(fd)));
      EXPECT_LE(err, 1e-6 + 1e-5 * std::abs(fd))
          << k.name << ": d loss / d " << name << "[" << i << "] autodiff " << ad[i] << " vs finite difference " << fd;
      r.checked++;
    }
  }
  return r;
}

class GradCheck : public testing::TestWithParam<Case> {};

TEST_P(GradCheck, MatchesFiniteDifferences) {
  Result r = check(GetParam());
  EXPECT_GT(r.checked, 0u);
}

INSTANTIATE_TEST_SUITE_P(Ops, GradCheck, testing::ValuesIn(cases()), [](const testing::TestParamInfo<Case>& i) {
  std::string n = i.param.name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

// Every op of the table has a check: directly, or (backward-only ops) through its forward op.
TEST(GradCheck, EveryOpIsCovered) {
  std::map<Op, int> covered;
  for (const Case& k : cases()) covered[k.op]++;
  std::printf("%-24s %-14s %s\n", "op", "gradient", "check");
  int missing = 0;
  for (const OpInfo& info : op_table()) {
    std::string status;
    switch (info.grad) {
      case GradKind::leaf: status = "leaf (no check needed)"; break;
      case GradKind::fused: status = "created after autodiff: core_passes_test"; break;
      case GradKind::forward_only: status = "inference only, autodiff refuses: forward cases"; break;
      case GradKind::backward_only:
        status = covered.count(info.checked_by) ? "via " + std::string(op_name(info.checked_by)) : "MISSING";
        break;
      default: status = covered.count(info.op) ? std::to_string(covered[info.op]) + " case(s)" : "MISSING";
    }
    const char* kind = info.grad == GradKind::vjp            ? "vjp"
                       : info.grad == GradKind::none         ? "zero"
                       : info.grad == GradKind::leaf         ? "leaf"
                       : info.grad == GradKind::fused        ? "fused"
                       : info.grad == GradKind::forward_only ? "forward-only"
                                                             : "backward-only";
    std::printf("%-24s %-14s %s\n", std::string(info.name).c_str(), kind, status.c_str());
    if (status == "MISSING") {
      ++missing;
      ADD_FAILURE() << "op " << info.name << " has no gradient check";
    }
  }
  EXPECT_EQ(missing, 0);
}

}  // namespace
}  // namespace meganeura
