// Flash attention on Vulkan (attention.comp) against the CPU backend's f64 oracle, forward and
// backward, with the validation layer on: causal and not, grouped-query, sequences that fill
// no tile evenly, more keys than queries (a prefix the causal diagonal is shifted by), head
// dimensions 32, 64 and 80, and a long key sequence whose per-invocation loops would pass
// lavapipe's 65,535 back-edges if the kernel's register loops were not unrolled.
//
// Tolerances: |vulkan - f64| <= tol * (1 + |f64|). The outputs are convex combinations of V
// rows and the log-sum-exp a log of a sum of exponentials, each an f32 evaluation of at most a
// few thousand terms: errors of a few 1e-6; 1e-4 is the op harness's forward bound. Gradients
// sum products of P and dP over up to 2,048 terms (f32 epsilon 1.2e-7 times sqrt(n) in
// expectation, times n in the worst case, on values of order 1): 2e-4, the harness's bound.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "meganeura/autodiff.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

struct AttentionCase {
  std::string name;
  int64_t b, hq, hkv, sq, sk, d, dv;
  bool causal;
};

void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name; }

// attention_fused_packed of parameters q, k, v with a weighted-sum head (weights of both signs
// so every gradient is seeded unevenly), its packed output and the three gradients as outputs.
Graph attention_graph(const AttentionCase& c) {
  Graph g;
  Tensor q = g.parameter("q", {c.b, c.hq, c.sq, c.d}, Init{Init::normal, 1});
  Tensor k = g.parameter("k", {c.b, c.hkv, c.sk, c.d}, Init{Init::normal, 1});
  Tensor v = g.parameter("v", {c.b, c.hkv, c.sk, c.dv}, Init{Init::normal, 1});
  Tensor y = attention_fused_packed(q, k, v, c.causal, 1.0 / std::sqrt(double(c.d)));
  std::mt19937 rng(3);
  std::vector<double> w(size_t(y.type().numel()));
  for (auto& x : w) x = std::uniform_real_distribution<double>(0.5, 1.5)(rng) * (rng() & 1 ? 1 : -1);
  g.output("out", y);
  auto grads = grad(sum(y * g.constant(w, y.shape())), {q, k, v});
  g.output("grad.q", grads[0]);
  g.output("grad.k", grads[1]);
  g.output("grad.v", grads[2]);
  return g;
}

class VulkanAttention : public testing::TestWithParam<AttentionCase> {};

TEST_P(VulkanAttention, MatchesF64Oracle) {
  MEGANEURA_REQUIRE_VULKAN();
  const AttentionCase& c = GetParam();
  Graph g = attention_graph(c);
  Session oracle(SessionOptions{Device::cpu, true, 1, 0});
  testing_vulkan::add_f64_oracle(oracle, g);
  Session gpu(testing_vulkan::vulkan_options());
  gpu.add(g);
  std::mt19937 rng(11);
  for (const char* name : {"q", "k", "v"}) {
    std::vector<double> x(size_t(gpu.buffers().at(name).type.numel()));
    for (auto& e : x) e = std::normal_distribution<double>(0, 1)(rng);
    oracle.set(name, std::span<const double>(x));
    gpu.set(name, std::span<const double>(x));
  }
  oracle.run();
  gpu.run();
  for (auto [name, tol] :
       {std::pair<const char*, double>{"out", 1e-4}, {"grad.q", 2e-4}, {"grad.k", 2e-4}, {"grad.v", 2e-4}}) {
    auto got = gpu.get_f64(name), want = oracle.get_f64(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << c.name << " " << name << " at " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, VulkanAttention,
                         testing::Values(AttentionCase{"causal_gqa_d32", 1, 4, 2, 37, 37, 32, 32, true},
                                         AttentionCase{"cross_d64", 2, 2, 2, 19, 45, 64, 64, false},
                                         AttentionCase{"causal_prefix_d80", 1, 3, 1, 20, 50, 80, 80, true},
                                         AttentionCase{"causal_mixed_heads", 1, 2, 1, 33, 33, 64, 40, true},
                                         AttentionCase{"long_keys_d64", 1, 1, 1, 40, 2048, 64, 64, false}),
                         [](const testing::TestParamInfo<AttentionCase>& i) { return i.param.name; });

}  // namespace
}  // namespace meganeura
