// Fused attention on Vulkan against the CPU backend's f64 oracle, forward and backward, with
// the validation layer on, through both kernels: the device's own choice and the GPU class's
// (on lavapipe: attention_rows.comp, then the shared-memory tiles of attention.comp). Causal
// and not, grouped-query, sequences that fill no tile evenly, more keys than queries (a prefix
// the causal diagonal is shifted by), head dimensions 32, 64 and 80, and a long key sequence:
// its tiled launches' loops would pass lavapipe's 65,535 back-edges if the kernel's register
// loops were not unrolled, its row launches take the key chunks the loop budget asks for; a
// long grouped-query causal case takes query chunks in the key-row launches.
//
// Tolerances: |vulkan - f64| <= tol * (1 + |f64|). The outputs are convex combinations of V
// rows and the log-sum-exp a log of a sum of exponentials, each an f32 evaluation of at most a
// few thousand terms: errors of a few 1e-6; 1e-4 is the op harness's forward bound. Gradients
// sum products of P and dP over up to 2,048 terms (f32 epsilon 1.2e-7 times sqrt(n) in
// expectation, times n in the worst case, on values of order 1): 2e-4, the harness's bound.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "graph/internal.h"
#include "meganeura/autodiff.h"
#include "meganeura/passes.h"
#include "runtime/init.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

struct AttentionCase {
  std::string name;
  int64_t b, hq, hkv, sq, sk, d, dv;
  bool causal;
};

void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name; }

// attention_fused_packed of parameters q, k, v with a weighted-sum head (an input w, of both
// signs so every gradient is seeded unevenly), its packed output and the three gradients as
// outputs.
Graph attention_graph(const AttentionCase& c) {
  Graph g;
  Tensor q = g.parameter("q", {c.b, c.hq, c.sq, c.d}, Init{Init::normal, 1});
  Tensor k = g.parameter("k", {c.b, c.hkv, c.sk, c.d}, Init{Init::normal, 1});
  Tensor v = g.parameter("v", {c.b, c.hkv, c.sk, c.dv}, Init{Init::normal, 1});
  Tensor y = attention_fused_packed(q, k, v, c.causal, 1.0 / std::sqrt(double(c.d)));
  g.output("out", y);
  auto grads = grad(sum(y * g.input("w", y.shape())), {q, k, v});
  g.output("grad.q", grads[0]);
  g.output("grad.k", grads[1]);
  g.output("grad.v", grads[2]);
  return g;
}

// The values of q, k and v (normal) and w (magnitudes 0.5 to 1.5, either sign), by name.
std::map<std::string, std::vector<double>> inputs(const Graph& g) {
  std::mt19937 rng(11);
  std::map<std::string, std::vector<double>> v;
  for (NodeId id : g.parameters()) {
    std::vector<double>& x = v[g.node(id).name];
    x.resize(size_t(g.node(id).type.numel()));
    for (auto& e : x) e = std::normal_distribution<double>(0, 1)(rng);
  }
  std::vector<double>& w = v["w"];
  w.resize(size_t(g.node(g.outputs().front().second).type.numel()));  // the packed output's size
  for (auto& e : w) e = std::uniform_real_distribution<double>(0.5, 1.5)(rng) * (rng() & 1 ? 1 : -1);
  return v;
}

// The case's outputs from a Vulkan backend whose kernel choices are those of `kernel_class`
// (on lavapipe: "" runs attention_rows.comp, "gpu" the shared-memory tiles of attention.comp).
std::map<std::string, std::vector<float>> run_vulkan(const Graph& g, const std::string& kernel_class) {
  VulkanOptions o;
  o.validation = testing_vulkan::validation_wanted();
  o.pipeline_cache = false;
  o.kernel_class = kernel_class;
  auto be = make_vulkan_backend(o);
  const Program p = plan(optimize(g, be->passes()), PlanOptions{DType::f32, be->limits()});
  const size_t program = be->add_program(p);
  for (const ExternalBuffer& e : p.externals) {  // the constants (autodiff's seed among them)
    if (!runtime::has_initial_values(e) || e.role == Role::parameter) continue;
    std::vector<std::byte> bytes(size_t(e.type.numel()) * dtype_size(e.stored));
    runtime::initial_values(e, 1, bytes.data());
    be->write(e.name, bytes.data(), bytes.size());
  }
  for (auto& [name, x] : inputs(g)) {
    std::vector<float> f(x.begin(), x.end());
    be->write(name, f.data(), f.size() * 4);
  }
  be->run(program);
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, id] : g.outputs()) {
    std::vector<float>& y = out[name];
    y.resize(size_t(g.node(id).type.numel()));
    be->read(name, y.data(), y.size() * 4);
  }
  return out;
}

class VulkanAttention : public testing::TestWithParam<AttentionCase> {};

TEST_P(VulkanAttention, MatchesF64Oracle) {
  MEGANEURA_REQUIRE_VULKAN();
  const AttentionCase& c = GetParam();
  Graph g = attention_graph(c);
  Session oracle(SessionOptions{.device = Device::cpu, .f64_oracle = true, .seed = 1});
  testing_vulkan::add_f64_oracle(oracle, g);
  for (auto& [name, x] : inputs(g)) oracle.set(name, std::span<const double>(x));
  oracle.run();
  for (const char* kernel_class : {"", "gpu"}) {
    auto got = run_vulkan(g, kernel_class);
    for (auto [name, tol] :
         {std::pair<const char*, double>{"out", 1e-4}, {"grad.q", 2e-4}, {"grad.k", 2e-4}, {"grad.v", 2e-4}}) {
      const std::vector<double> want = oracle.get_f64(name);
      ASSERT_EQ(got.at(name).size(), want.size()) << name;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got.at(name)[i], want[i], tol * (1 + std::abs(want[i])))
            << c.name << " " << name << " at " << i << " (kernel class '" << kernel_class << "')";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, VulkanAttention,
                         testing::Values(AttentionCase{"causal_gqa_d32", 1, 4, 2, 37, 37, 32, 32, true},
                                         AttentionCase{"cross_d64", 2, 2, 2, 19, 45, 64, 64, false},
                                         AttentionCase{"causal_prefix_d80", 1, 3, 1, 20, 50, 80, 80, true},
                                         AttentionCase{"causal_mixed_heads", 1, 2, 1, 33, 33, 64, 40, true},
                                         AttentionCase{"long_keys_d64", 1, 1, 1, 40, 2048, 64, 64, false},
                                         AttentionCase{"long_causal_gqa_d32", 1, 2, 1, 300, 300, 32, 32, true}),
                         [](const testing::TestParamInfo<AttentionCase>& i) { return i.param.name; });

}  // namespace
}  // namespace meganeura
