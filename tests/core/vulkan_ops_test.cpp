// Every op of the op table on the Vulkan backend (validation layer on: any message fails),
// forward and backward (the gradient graph holds the backward-only ops), against the CPU
// backend's f64 oracle, elementwise.
//
// Tolerances: |vulkan - f64| <= tol * (1 + |f64|) with the case's tol (1e-4 unless the case
// states its own, op_cases.h) for forward outputs; by default 1e-4 is the
// same bound the CPU backend's f32 path meets (f32 epsilon 1.2e-7 times accumulation lengths
// of at most a few hundred, plus the Vulkan spec's allowance of a few ULP for exp/log/sqrt and
// our erf approximation's 1.5e-7), and 2e-4 for gradients, which pass through twice as many
// rounded f32 operations. Large reductions get their own bound below.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>

#include "graph/internal.h"
#include "meganeura/autodiff.h"
#include "meganeura/models.h"
#include "meganeura/passes.h"
#include "meganeura/train.h"
#include "multi_output_case.h"
#include "op_cases.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

using op_cases::Case;
using testing_vulkan::vulkan_options;

void compare(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " at " << i;
  }
}

class VulkanOp : public testing::TestWithParam<Case> {};

// The case's op with a weighted-sum head (so gradients carry a non-uniform seed), its output
// and the gradient of every parameter as outputs.
Graph case_graph(const Case& k) {
  Graph g;
  Tensor y = k.build(g);
  std::mt19937 wrng(7);
  std::vector<double> w(size_t(y.type().numel()));
  for (auto& v : w) v = std::uniform_real_distribution<double>(0.5, 1.5)(wrng) * (wrng() & 1 ? 1 : -1);
  Tensor loss = sum(y * g.constant(w, y.shape()));
  g.output("out", y);
  if (k.forward_only) return g;
  std::vector<Tensor> params;
  for (NodeId id : g.parameters()) params.push_back(g.tensor(id));
  auto grads = grad(loss, params);
  for (size_t i = 0; i < params.size(); ++i) g.output("grad." + g.node(params[i].id).name, grads[i]);
  return g;
}

// Runs the case's graph on the oracle and on Vulkan, once as planned from the graph (the
// primitive kernels) and once through the rewrite passes (the fused kernels) when they change
// it, and compares every output elementwise.
TEST_P(VulkanOp, MatchesF64Oracle) {
  MEGANEURA_REQUIRE_VULKAN();
  const Case& k = GetParam();
  Graph g = case_graph(k);
  std::vector<Tensor> params;
  for (NodeId id : g.parameters()) params.push_back(g.tensor(id));

  Session oracle(SessionOptions{.device = Device::cpu, .f64_oracle = true, .seed = 1});
  PlanOptions f64;
  f64.float_dtype = DType::f64;
  oracle.add(plan(g, f64));
  std::vector<Session> gpus;
  gpus.emplace_back(vulkan_options());
  // primitive kernels only: no fusing pass, but what the backend has no kernel for decomposed
  const PassOptions primitive{false, false, false, false, false, false, gpus.back().backend().passes().decompose};
  gpus.back().add(plan(optimize(g, primitive), PlanOptions{DType::f32, gpus.back().backend().limits()}));
  const Program fused =
      plan(optimize(g, gpus.back().backend().passes()), PlanOptions{DType::f32, gpus.back().backend().limits()});
  if (fused.hash() != gpus.back().program(0).hash()) {
    gpus.emplace_back(vulkan_options());
    gpus.back().add(fused);
  }
  std::mt19937 rng(11);
  for (const Tensor& p : params) {
    const std::string& name = g.node(p.id).name;
    std::vector<double> v(size_t(p.type().numel()));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = k.value ? k.value(name, int64_t(i), rng) : std::normal_distribution<double>(0, 1)(rng);
    oracle.set(name, std::span<const double>(v));
    for (Session& gpu : gpus) gpu.set(name, std::span<const double>(v));
  }
  for (auto& [name, ids] : k.int_inputs) {
    oracle.set(name, std::span<const int32_t>(ids));
    for (Session& gpu : gpus) gpu.set(name, std::span<const int32_t>(ids));
  }
  oracle.run();
  for (size_t i = 0; i < gpus.size(); ++i) {
    Session& gpu = gpus[i];
    const std::string how = i == 0 ? " (primitive kernels)" : " (fused kernels)";
    gpu.run();
    compare(gpu.get_f64("out"), oracle.get_f64("out"), k.tol, k.name + " forward" + how);
    for (const Tensor& p : params) {
      if (k.forward_only) break;
      const std::string name = "grad." + g.node(p.id).name;
      compare(gpu.get_f64(name), oracle.get_f64(name), 2 * k.tol, k.name + " " + name + how);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, VulkanOp, testing::ValuesIn(op_cases::cases()),
                         [](const testing::TestParamInfo<Case>& i) {
                           std::string n = i.param.name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

std::vector<double> randn(int64_t n, uint64_t seed, double mean = 0) {
  std::mt19937_64 r(seed);
  std::normal_distribution<double> d(mean, 1);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(r);
  return v;
}

// Long sums: a serial f32 loop over 401,408 values of mean 1 drifts by ~1e-4 relative; the
// tree reduction must stay within 2e-6 of the f64 sum (a few f32 ulps of the total).
TEST(VulkanReduce, LongSumsAreAccurate) {
  MEGANEURA_REQUIRE_VULKAN();
  for (int64_t n : {int64_t(49152), int64_t(401408)}) {
    Graph g;
    Tensor x = g.input("x", {n});
    g.output("s", sum(x));
    g.output("m", mean(reshape(x, {n / 128, 128}), {0}));
    g.output("ss", sum(x * x));  // a fused reduction (the program x * x, then the sum)
    Session gpu(vulkan_options());
    gpu.add(g);
    auto v = randn(n, uint64_t(n), 1.0);
    std::vector<float> f(v.begin(), v.end());
    gpu.set("x", std::span<const float>(f));
    gpu.run();
    double want = 0;
    for (float t : f) want += double(t);
    EXPECT_NEAR(gpu.get_f64("s")[0], want, 2e-6 * std::abs(want)) << n;
    double want_ss = 0;
    for (float t : f) want_ss += double(t * t);  // the f32 products the kernel forms, summed in f64
    EXPECT_NEAR(gpu.get_f64("ss")[0], want_ss, 2e-6 * want_ss) << n;
    auto m = gpu.get_f64("m");
    for (int64_t j = 0; j < 128; ++j) {
      double s = 0;
      for (int64_t i = 0; i < n / 128; ++i) s += double(f[size_t(i * 128 + j)]);
      ASSERT_NEAR(m[size_t(j)], s / double(n / 128), 1e-5) << n << " column " << j;
    }
  }
}

// Few long rows: each output's reduction is split into pieces and a second launch combines
// them, one workgroup per output (16 rows of 8192, and 16 columns of 8192: every output must
// get its own pieces, not a neighbour's). Bound: Kahan-compensated pieces and a pairwise
// combine keep the f32 sum within 2e-6 of the f64 sum of the same values.
TEST(VulkanReduce, FewLongRowsEachGetTheirOwnPieces) {
  MEGANEURA_REQUIRE_VULKAN();
  constexpr int64_t rows = 16, len = 8192;
  Graph g;
  Tensor x = g.input("x", {rows, len});
  g.output("rows", sum(x, {1}));
  g.output("rows_sq", sum(x * x, {1}));  // fused: the program x * x, then the split sum
  g.output("rows_max", max(x, {1}));
  g.output("cols", sum(reshape(x, {len, rows}), {0}));
  Session gpu(vulkan_options());
  gpu.add(g);
  auto v = randn(rows * len, 7, 1.0);
  std::vector<float> f(v.begin(), v.end());
  gpu.set("x", std::span<const float>(f));
  gpu.run();
  auto sums = gpu.get_f64("rows"), squares = gpu.get_f64("rows_sq"), maxima = gpu.get_f64("rows_max"),
       cols = gpu.get_f64("cols");
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0, ss = 0, m = -1e300, c = 0;
    for (int64_t j = 0; j < len; ++j) {
      const float t = f[size_t(r * len + j)];
      s += double(t), ss += double(t * t), m = std::max(m, double(t));
      c += double(f[size_t(j * rows + r)]);
    }
    EXPECT_NEAR(sums[size_t(r)], s, 2e-6 * (1 + std::abs(s)) + 1e-4) << "row " << r;
    EXPECT_NEAR(squares[size_t(r)], ss, 2e-6 * ss) << "row " << r;
    EXPECT_EQ(maxima[size_t(r)], m) << "row " << r;
    EXPECT_NEAR(cols[size_t(r)], c, 2e-6 * (1 + std::abs(c)) + 1e-4) << "column " << r;
  }
}

// Tile edges: sizes that are not multiples of any tile, every transpose, batched and shared.
// Sums of 130 products of N(0,1) values: f32 error well under 1e-4 * (1 + |c|).
TEST(VulkanMatmul, RaggedTilesTransposesAndBatches) {
  MEGANEURA_REQUIRE_VULKAN();
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int64_t B = 3, M = 67, K = 130, N = 45;
      Graph g;
      Tensor a = g.input("a", ta ? Shape{B, K, M} : Shape{B, M, K});
      Tensor b = g.input("b", tb ? Shape{N, K} : Shape{K, N});
      Tensor b3 = g.input("b3", tb ? Shape{B, N, K} : Shape{B, K, N});
      g.output("c", matmul(a, b, ta, tb));
      g.output("c3", matmul(a, b3, ta, tb));
      Session oracle(SessionOptions{.device = Device::cpu, .f64_oracle = true, .seed = 1});
      Session gpu(vulkan_options());
      oracle.add(g);
      gpu.add(g);
      for (auto [name, seed] : {std::pair<const char*, uint64_t>{"a", 1}, {"b", 2}, {"b3", 3}}) {
        auto v = randn(gpu.buffers().at(name).type.numel(), seed);
        oracle.set(name, std::span<const double>(v));
        gpu.set(name, std::span<const double>(v));
      }
      oracle.run();
      gpu.run();
      compare(gpu.get_f64("c"), oracle.get_f64("c"), 1e-4, "matmul shared b");
      compare(gpu.get_f64("c3"), oracle.get_f64("c3"), 1e-4, "matmul batched");
    }
  }
}

// The step counter is an exact i32: past 2^24, where an f32 counter stops, and it saturates at
// 2^31 - 1 instead of wrapping to a negative step.
TEST(VulkanOptim, CounterIsExactBeyondF32) {
  MEGANEURA_REQUIRE_VULKAN();
  Graph g;
  Tensor n = g.input("n", {}, DType::i32);
  g.output("next", increment(n));
  Session gpu(vulkan_options());
  gpu.add(g);
  for (auto [in, want] : {std::pair<int32_t, int32_t>{16777216, 16777217}, {-1, 0}, {INT32_MAX, INT32_MAX}}) {
    gpu.set("n", std::span<const int32_t>(&in, 1));
    gpu.run();
    int32_t got = 0;
    auto bytes = gpu.read_raw("next");
    ASSERT_EQ(bytes.size(), 4u);
    std::memcpy(&got, bytes.data(), 4);
    EXPECT_EQ(got, want) << "increment of " << in;
  }
}

// A Vulkan session runs the rewrite passes the backend has kernels for (all of them where the
// device allows the fused kernels' twelve bindings per stage, none of the fusing ones otherwise),
// and computes what the CPU backend computes.
TEST(VulkanSession, RunsTheRewritePassesItHasKernelsFor) {
  MEGANEURA_REQUIRE_VULKAN();
  Graph g;
  Tensor x = g.input("x", {4, 8});
  Tensor w = g.parameter("w", {8}, Init{Init::normal, 1});
  g.output("y", rms_norm(x, w) * 2.0 + 1.0);
  Session cpu(SessionOptions{.device = Device::cpu, .seed = 1});
  Session gpu(vulkan_options(1));
  cpu.add(g);
  gpu.add(g);
  auto fused = [](const Program& p) {
    size_t n = 0;
    for (const Dispatch& d : p.dispatches) n += op_info(d.op).family == OpFamily::fused;
    return n;
  };
  EXPECT_GT(fused(cpu.program(0)), 0u) << "the CPU backend runs the fusing passes";
  if (gpu.backend().passes().pointwise)
    EXPECT_EQ(fused(gpu.program(0)), fused(cpu.program(0)));
  else
    EXPECT_EQ(fused(gpu.program(0)), 0u);
  std::printf("vulkan program: %zu dispatches, %zu fused\n", gpu.program(0).dispatches.size(), fused(gpu.program(0)));
  auto v = randn(32, 5);
  cpu.set("x", std::span<const double>(v));
  gpu.set("x", std::span<const double>(v));
  cpu.run();
  gpu.run();
  compare(gpu.get_f64("y"), cpu.get_f64("y"), 1e-5, "rms_norm");  // two f32 evaluations in different orders
}

// Optimizer updates as multi-output fused programs (new moments or momentum and the new
// parameter in one dispatch, each written in place): two training steps on Vulkan against the
// CPU backend's f64 oracle running the unfused graph. Tolerance as for the rewrite passes'
// f32 equivalence: a few f32 ulps amplified through two steps (Adam divides by sqrt(v)),
// 2e-4 relative plus 2e-5 absolute.
TEST(VulkanMultiOutput, OptimizerStepsMatchOracle) {
  MEGANEURA_REQUIRE_VULKAN();
  for (auto kind : {OptimizerConfig::Kind::adamw, OptimizerConfig::Kind::sgd}) {
    OptimizerConfig o;
    o.kind = kind;
    o.lr = kind == OptimizerConfig::Kind::sgd ? 0.1 : 1e-2;
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    o.clip_norm = kind == OptimizerConfig::Kind::sgd ? 0 : 1.0;
    Graph g = training_graph(
        [](Graph& gg) {
          models::MlpConfig c{6, 12, 3, 2};
          return cross_entropy(models::mlp(gg, gg.input("x", {5, 6}), c), gg.input("labels", {5}, DType::i32));
        },
        o);
    const std::string what = kind == OptimizerConfig::Kind::sgd ? "sgd momentum" : "adamw";
    Session oracle(SessionOptions{.device = Device::cpu, .f64_oracle = true, .seed = 1});
    PlanOptions f64;
    f64.float_dtype = DType::f64;
    oracle.add(plan(g, f64));
    Session gpu(vulkan_options());
    gpu.add(g);
    const size_t params = g.parameters().size(), want_writes = kind == OptimizerConfig::Kind::sgd ? 2 : 3;
    size_t multi = 0;
    for (const Dispatch& d : gpu.program(0).dispatches) multi += d.writes.size() == want_writes;
    if (gpu.backend().passes().pointwise) {
      EXPECT_EQ(multi, params) << what << ": one update dispatch per parameter";
    }
    std::printf("%s on Vulkan: %zu dispatches, %zu multi-output\n", what.c_str(), gpu.program(0).dispatches.size(),
                multi);
    std::mt19937 rng(5);
    for (NodeId id : g.parameters()) {
      const Node& n = g.node(id);
      std::vector<double> v(size_t(n.type.numel()));
      for (auto& x : v) x = std::normal_distribution<double>(0, 0.5)(rng);
      oracle.set(n.name, std::span<const double>(v));
      gpu.set(n.name, std::span<const double>(v));
    }
    for (int step = 0; step < 2; ++step) {
      auto x = randn(30, 40 + uint64_t(step));
      std::vector<int32_t> labels = {0, 2, 1, 1, 2};
      for (Session* s : {&oracle, &gpu}) {
        s->set("x", std::span<const double>(x));
        s->set("labels", std::span<const int32_t>(labels));
        s->run();
      }
      for (auto& [name, buf] : oracle.buffers()) {
        if (buf.role != Role::parameter && buf.role != Role::state && buf.role != Role::output) continue;
        auto want = oracle.get_f64(name), got = gpu.get_f64(name);
        ASSERT_EQ(got.size(), want.size()) << name;
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 2e-5 + 2e-4 * std::abs(want[i]))
              << what << " " << name << "[" << i << "] step " << step;
        }
      }
    }
  }
}

// A hand-written program with three outputs (one read back by a later dispatch) on Vulkan,
// against values computed here in double: u = a * b + c (b broadcast), w = exp(u) - a,
// y = u / 2 + w, z = exp(u). Tolerance: the f32 roundings of |u| <= 3.75 and exp(u) <= 43 and
// exp's few-ulp allowance in the Vulkan spec, 2e-6 relative to (1 + |value|).
TEST(VulkanMultiOutput, HandWrittenProgramMatchesDouble) {
  MEGANEURA_REQUIRE_VULKAN();
  multi_output_case::Built b = multi_output_case::three_output_graph(true, false);
  Graph& g = b.g;
  Session gpu(vulkan_options());
  gpu.add(plan(g, PlanOptions{DType::f32, gpu.backend().limits()}));
  auto av = randn(15, 1), bv = randn(5, 2), cv = randn(15, 3);
  for (auto& v : av) v = std::tanh(v) * 1.5;
  for (auto& v : bv) v = std::tanh(v) * 1.5;
  for (auto& v : cv) v = std::tanh(v) * 1.5;
  gpu.set("a", std::span<const double>(av));
  gpu.set("b", std::span<const double>(bv));
  gpu.set("c", std::span<const double>(cv));
  gpu.run();
  std::vector<double> wy(15), ww(15), wz(15);
  for (size_t i = 0; i < 15; ++i) {
    const double uu = double(float(av[i])) * double(float(bv[i % 5])) + double(float(cv[i]));
    ww[i] = std::exp(uu) - double(float(av[i]));
    wy[i] = 0.5 * uu + ww[i];
    wz[i] = std::exp(uu);
  }
  compare(gpu.get_f64("y"), wy, 2e-6, "output 0");
  compare(gpu.get_f64("w"), ww, 2e-6, "output 2");
  compare(gpu.get_f64("z"), wz, 2e-6, "a read of output 1");
}

// The cases' programs (forward and gradients, with and without the rewrite passes, as run
// above) dispatch every non-leaf op of the table, so each op's kernel is exercised by some case;
// and each case dispatches the op it is named for.
TEST(VulkanCoverage, CasesDispatchEveryOp) {
  std::set<Op> ops;
  for (const Case& k : op_cases::cases()) {
    Graph g = case_graph(k);
    std::set<Op> mine;
    // as the Vulkan backend runs them: without and with the fusing passes
    PassOptions primitive{false, false, false, false, false, false, false}, fusing;
    for (const Dispatch& d : plan(optimize(g, primitive)).dispatches) mine.insert(d.op);
    for (const Dispatch& d : plan(optimize(g, fusing)).dispatches) mine.insert(d.op);
    EXPECT_TRUE(mine.count(k.op)) << "case " << k.name << " dispatches no " << op_name(k.op);
    ops.insert(mine.begin(), mine.end());
  }
  for (const OpInfo& info : op_table()) {
    if (info.family == OpFamily::leaf) continue;
    if (info.op == Op::fused_output) continue;  // a further write of a fused dispatch, never dispatched
    EXPECT_TRUE(ops.count(info.op)) << "op " << info.name << " is dispatched by no Vulkan case";
  }
}

// What a kernel cannot take is refused when the program is added, naming the op and the limit.
TEST(VulkanCoverage, ShapesBeyondAKernelAreNamed) {
  MEGANEURA_REQUIRE_VULKAN();
  Graph g;
  Tensor q = g.parameter("q", {1, 1, 4, 160}, Init{Init::normal, 1});
  g.output("y", attention_fused_packed(q, q, q, false, 0.1));
  try {
    Session s(testing_vulkan::vulkan_options());
    s.add(g);
    FAIL() << "attention with a head dimension of 160 was accepted on Vulkan";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("[vulkan:attention_fused] head dimension 160 exceeds"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace meganeura
