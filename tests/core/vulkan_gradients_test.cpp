// The bounded gradient kernels and split reductions on Vulkan, at shapes whose old kernels ran
// past lavapipe's loop budget of 32,768 back-edges per invocation (or far past a sensible
// amount of work), against the CPU backend's f64 oracle with the validation layer on:
// - max and average pool backward with ResNet-50's stem pool (3x3, stride 2, pad 1) over a
//   160x160 input (the old kernel scanned all 80x80 windows per input element: 89,761
//   back-edges, past lavapipe's 65,535, where it silently stops);
// - embedding and gather backward over 70,000 ids (the old kernels walked every id per table
//   element: 70,001), each repeated about 1,400 times;
// - cross-entropy backward over 3,000 rows of 1,000 classes with ignored rows (the old kernel
//   recounted every row in every row's workgroup);
// - sum, mean and max over 3,000,000 elements with a single output (split into pieces).
//
// Tolerance |vulkan - f64| <= tol * (1 + |f64|): pooling gradients sum at most 4 terms (1e-6);
// the scatter-adds add 274 chunk sums of about 5 values of N(0,1) each into a row's f32
// gradient (at most 274 roundings of 6e-8 relative to the row's partial sums: 1.7e-5); cross-entropy gradients are
// f32 softmax values (1e-6 relative plus the exp allowance: 1e-5); the long reductions combine
// Kahan-compensated pieces with trees (2e-6 relative to the sum of magnitudes).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>

#include "graph/internal.h"
#include "meganeura/autodiff.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

std::vector<double> randn(int64_t n, uint64_t seed) {
  std::mt19937_64 r(seed);
  std::normal_distribution<double> d(0, 1);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(r);
  return v;
}

// Runs `g` on the f64 oracle and on Vulkan with the same inputs and compares `outputs`.
void compare_with_oracle(const Graph& g, const std::map<std::string, std::vector<double>>& floats,
                         const std::map<std::string, std::vector<int32_t>>& ints,
                         const std::vector<std::string>& outputs, double tol) {
  Session oracle(SessionOptions{.device = Device::cpu, .f64_oracle = true, .seed = 1});
  testing_vulkan::add_f64_oracle(oracle, g);
  Session gpu(testing_vulkan::vulkan_options());
  gpu.add(g);
  for (auto& [name, v] : floats) {
    if (!gpu.buffers().count(name)) continue;  // an input the graph does not use
    oracle.set(name, std::span<const double>(v));
    gpu.set(name, std::span<const double>(v));
  }
  for (auto& [name, v] : ints) {
    oracle.set(name, std::span<const int32_t>(v));
    gpu.set(name, std::span<const int32_t>(v));
  }
  oracle.run();
  gpu.run();
  for (const std::string& name : outputs) {
    auto got = gpu.get_f64(name), want = oracle.get_f64(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << name << " at " << i;
    }
  }
}

TEST(VulkanGradients, PoolBackwardWithTheResnetStemWindow) {
  MEGANEURA_REQUIRE_VULKAN();
  for (bool max : {true, false}) {
    Graph g;
    Tensor x = g.input("x", {1, 2, 160, 160});
    Tensor dy = g.input("dy", {1, 2, 80, 80});
    PoolAttrs a;
    a.kernel[0] = a.kernel[1] = 3;
    a.stride[0] = a.stride[1] = 2;
    a.pad[0] = a.pad[1] = 1;
    a.grad_shape = {1, 2, 160, 160};
    g.output("dx", max ? max_pool2d_backward(x, dy, a) : avg_pool2d_backward(dy, a));
    // Distinct values: a tie would make the max's argmax depend on rounding.
    std::vector<double> xv(2 * 160 * 160);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::fmod(double(i) * 0.6180339887, 1.0) + double(i) * 1e-6;
    compare_with_oracle(g, {{"x", xv}, {"dy", randn(2 * 80 * 80, 2)}}, {}, {"dx"}, 1e-6);
  }
}

// 70,000 ids over 50 rows, each row's gradient a sum of about 1,400.
std::vector<int32_t> many_ids() {
  std::vector<int32_t> ids(70000);
  std::mt19937 r(5);
  for (auto& id : ids) id = int32_t(r() % 50);
  return ids;
}

TEST(VulkanGradients, EmbeddingAndGatherBackwardOverManyIds) {
  MEGANEURA_REQUIRE_VULKAN();
  Graph g;
  Tensor dy = g.input("dy", {70000, 3});
  Tensor ids = g.input("ids", {70000}, DType::i32);
  g.output("table", embedding_backward(dy, ids, 50));
  Tensor dz = g.input("dz", {2, 70000, 2});
  g.output("gathered", gather_backward(dz, ids, 1, 50));
  compare_with_oracle(g, {{"dy", randn(210000, 3)}, {"dz", randn(280000, 4)}}, {{"ids", many_ids()}},
                      {"table", "gathered"}, 2e-5);
}

TEST(VulkanGradients, CrossEntropyBackwardOverManyRows) {
  MEGANEURA_REQUIRE_VULKAN();
  Graph g;
  Tensor logits = g.parameter("logits", {3000, 1000}, Init{Init::normal, 1});
  Tensor t = g.input("t", {3000}, DType::i32);
  Tensor loss = cross_entropy(logits, t, -100);
  g.output("loss", loss);
  g.output("grad", grad(loss, {logits})[0]);
  std::vector<int32_t> targets(3000);
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = i % 7 == 0 ? -100 : int32_t((i * 37) % 1000);
  compare_with_oracle(g, {{"logits", randn(3000000, 6)}}, {{"t", targets}}, {"loss", "grad"}, 1e-5);
}

TEST(VulkanReduce, SplitReductionsOfOneOutput) {
  MEGANEURA_REQUIRE_VULKAN();
  const int64_t n = 3000000;
  Graph g;
  Tensor x = g.input("x", {n});
  g.output("sum", sum(x));
  g.output("mean", mean(x));
  g.output("max", max(x, {0}));
  g.output("sumsq", sum(x * x));  // a fused reduction
  auto v = randn(n, 7);
  double magnitude = 0, squares = 0;
  for (double e : v) magnitude += std::abs(e), squares += e * e;
  // The bound scales with the sum of magnitudes: relative to (1 + |f64|) as compare does.
  const double tol = 2e-6 * magnitude / (1 + std::sqrt(squares));
  compare_with_oracle(g, {{"x", v}}, {}, {"sum", "mean", "max", "sumsq"}, tol);
}

}  // namespace
}  // namespace meganeura
