// The precision contracts (apply_precision, SessionOptions::precision).
//
// - The rounding ops against independent conversions: the compiler's IEEE half type (_Float16,
//   round to nearest even) and bfloat16 by comparing x with its two bf16 neighbours; bit for bit
//   on the CPU (f32), the f64 oracle and Vulkan.
// - The pass: every forward product's f32 operand rounded once, nothing autodiff or the
//   optimizer made touched (a failing check here means gradients ran in reduced precision).
// - Each product under a contract, with bounds derived per output element from S = sum |a||b|
//   over its reduction (computed by the f64 oracle on |a|, |b|), k terms, u the operand format's
//   unit roundoff (2^-11 f16, 2^-8 bf16) and e = 2^-24 (f32):
//     CPU, Vulkan (f32 accumulation)  vs f64 oracle of the same contract: |d| <= (k + 2) e S
//     f64 oracle of the contract       vs f64 strict:                      |d| <= (2u + u^2) S
//   (rounding each operand moves each product by at most (2u + u^2)|a||b|; recursive f32
//   summation of k terms is within k e of exact, blocked and tree orders within less).
// - Weights held in 16 bits (SessionOptions::weights_dtype): which parameters the plan holds,
//   the memory the five workloads' inference plans need, and each workload's forward pass
//   against a strict run on the same weights rounded on the host.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "graph/internal.h"
#include "graph/op_table.h"
#include "meganeura/autodiff.h"
#include "meganeura/checkpoint.h"
#include "meganeura/passes.h"
#include "meganeura/safetensors.h"
#include "meganeura/session.h"
#include "meganeura/train.h"
#include "meganeura/vulkan.h"
#include "meganeura/workloads.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

using testing_vulkan::vulkan_options;

// The nearest bf16 value by comparison: the two bf16 neighbours of x (its f32 bits truncated to
// the upper 16, and the next bf16 away from zero), the closer one in double, on a tie the one
// whose last kept bit is 0. Past the largest finite value the next one up is infinity, whose
// distance counts as that of 2^128 (IEEE rounding as if the exponent range went on).
float bf16_nearest(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;
  const double above = std::isinf(std::bit_cast<float>(hi)) ? std::copysign(std::ldexp(1.0, 128), double(x))
                                                            : double(std::bit_cast<float>(hi));
  const double dl = std::abs(double(x) - double(std::bit_cast<float>(lo)));
  const double dh = std::abs(above - double(x));
  return std::bit_cast<float>(dl < dh ? lo : dh < dl ? hi : (lo & 0x10000u) ? hi : lo);
}

// Values that reach every case of the rounding: zeros, ties (both parities), the f16 subnormal
// range and its edge, the largest finite values and just past them, and random values of every
// magnitude from 2^-30 to 2^20, both signs.
std::vector<float> rounding_inputs() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, -65520.0f, 1e6f,
                          // 1 + 2^-11 (tie, to even: 1), 1 + 3 * 2^-11 (tie, to even: 1 + 2^-9)
                          1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11),
                          // the smallest f16 subnormal, half of it (tie: to 0), 0.75 of it (up)
                          std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), 0.75f * std::ldexp(1.0f, -24),
                          std::ldexp(1.0f, -14), std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25), 3.3895e38f, 3.4e38f,
                          // bf16 ties: 1 + 2^-8 (to 1), 1 + 3 * 2^-8 (to 1 + 2^-6)
                          1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8)};
  std::mt19937 rng(5);
  for (int i = 0; i < 4000; ++i) {
    const float m = std::uniform_real_distribution<float>(0.5f, 1.0f)(rng);
    const int e = std::uniform_int_distribution<int>(-30, 20)(rng);
    v.push_back((rng() & 1 ? 1.0f : -1.0f) * std::ldexp(m, e));
  }
  // Exact midpoints between neighbouring f16 values (ties in f32 and f64 alike).
  for (int i = 0; i < 500; ++i) {
    const float h = std::ldexp(std::uniform_real_distribution<float>(1.0f, 2.0f)(rng), -(i % 20));
    const int e = std::ilogb(h);
    const float step = std::ldexp(1.0f, std::max(e, -14) - 10);
    v.push_back(std::floor(h / step) * step + step / 2);
  }
  return v;
}

std::vector<float> run_rounding(Op op, const std::vector<float>& x, SessionOptions so) {
  Graph g;
  Tensor in = g.input("x", {int64_t(x.size())});
  g.output("y", graph_internal::add_node(g, op, NoAttrs{}, {in.id}, in.type()));
  Session s(so);
  s.add(g);
  s.set("x", std::span<const float>(x));
  s.run();
  if (so.f64_oracle) {
    std::vector<double> d = s.get_f64("y");
    return std::vector<float>(d.begin(), d.end());  // exact: the results are f16 / bf16 values
  }
  return s.get("y");
}

void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& x,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
        << what << ": x = " << x[i] << " (bits " << std::hex << std::bit_cast<uint32_t>(x[i]) << ") gives " << got[i]
        << ", want " << want[i];
  }
}

TEST(Rounding, MatchesIndependentConversionsOnEveryBackend) {
  const std::vector<float> x = rounding_inputs();
  std::vector<float> f16(x.size()), bf16(x.size());
#ifdef __FLT16_MAX__
  for (size_t i = 0; i < x.size(); ++i) f16[i] = float(static_cast<_Float16>(x[i]));
#else
  GTEST_SKIP() << "skipped: this compiler has no _Float16 to check against";
#endif
  for (size_t i = 0; i < x.size(); ++i) bf16[i] = bf16_nearest(x[i]);
  expect_bits(run_rounding(Op::round_f16, x, {}), f16, x, "round_f16, CPU");
  expect_bits(run_rounding(Op::round_bf16, x, {}), bf16, x, "round_bf16, CPU");
  expect_bits(run_rounding(Op::round_f16, x, {.f64_oracle = true}), f16, x, "round_f16, f64 oracle");
  expect_bits(run_rounding(Op::round_bf16, x, {.f64_oracle = true}), bf16, x, "round_bf16, f64 oracle");
  if (!testing_vulkan::missing_device().empty()) {
    std::printf("Vulkan part skipped: %s\n", testing_vulkan::missing_device().c_str());
    return;
  }
  expect_bits(run_rounding(Op::round_f16, x, vulkan_options()), f16, x, "round_f16, Vulkan");
  expect_bits(run_rounding(Op::round_bf16, x, vulkan_options()), bf16, x, "round_bf16, Vulkan");
}

TEST(Precision, NamesRoundTripAndUnknownOnesAreRefused) {
  for (Precision p : {Precision::strict, Precision::accelerated, Precision::accelerated_bf16})
    EXPECT_EQ(parse_precision(precision_name(p)), p);
  try {
    parse_precision("fp8");
    FAIL() << "fp8 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'fp8'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("accelerated-bf16"), std::string::npos) << e.what();
  }
}

bool is_product(Op op) { return op == Op::matmul || op == Op::conv2d || op == Op::attention_fused; }
bool is_rounding(Op op) { return op == Op::round_f16 || op == Op::round_bf16; }

// A workload's training graph (loss, gradients, Adam's update) under both accelerated contracts.
TEST(Precision, RoundsForwardProductsOnlyAndNeverWhatAutodiffMade) {
  for (const char* workload : {"unet", "whisper", "resnet50"}) {
    SCOPED_TRACE(workload);
    size_t forward_end = 0;
    Graph g = training_graph(
        [&](Graph& gg) {
          models::Workload w = models::build_workload(gg, workload, models::Scale::ci);
          forward_end = gg.size();
          return w.loss;
        },
        OptimizerConfig{});
    // What the loss builder made is unpinned; everything after it (autodiff, optimizer) pinned.
    for (NodeId id = 0; id < g.size(); ++id) ASSERT_EQ(g.node(id).pinned, id >= forward_end) << "node " << id;
    EXPECT_EQ(apply_precision(g, Precision::strict).hash(), g.hash());
    for (Precision p : {Precision::accelerated, Precision::accelerated_bf16}) {
      uint32_t made = 0;
      const Graph a = apply_precision(g, p, &made);
      const Op want = p == Precision::accelerated ? Op::round_f16 : Op::round_bf16;
      size_t forward_products = 0, backward_products = 0, roundings = 0;
      for (NodeId id = 0; id < a.size(); ++id) {
        const Node& n = a.node(id);
        if (is_rounding(n.op)) {
          ++roundings;
          EXPECT_EQ(n.op, want);
          EXPECT_FALSE(n.pinned);
        }
        for (NodeId k : n.inputs) {
          if (n.pinned) {
            EXPECT_FALSE(is_rounding(a.node(k).op)) << op_name(n.op) << " %" << id << " is pinned";
          }
        }
        if (!is_product(n.op)) continue;
        (n.pinned ? backward_products : forward_products)++;
        if (n.pinned) continue;
        for (NodeId k : n.inputs) {
          if (a.node(k).type.dtype == DType::f32) {
            EXPECT_EQ(a.node(k).op, want) << op_name(n.op) << " %" << id << " reads an unrounded operand";
          }
        }
      }
      EXPECT_GT(forward_products, 0u);
      EXPECT_GT(backward_products, 0u);  // the gradients' matmuls, left in f32
      EXPECT_EQ(roundings, made);
      EXPECT_GT(made, 0u);
      // Once per source: a second application changes nothing; the contracts differ.
      EXPECT_EQ(apply_precision(a, p).hash(), a.hash());
      EXPECT_NE(a.hash(), g.hash());
    }
  }
}

struct Product {
  const char* name;
  std::function<Tensor(Graph&)> build;  // from parameters named a, b (and c); output "y"
  int64_t k;                            // the reduction length
};

std::vector<Product> products() {
  return {
      {"matmul",
       [](Graph& g) {
         return matmul(g.parameter("a", {9, 300}, {}), g.parameter("b", {300, 13}, {}));
       },
       300},
      {"conv2d",
       [](Graph& g) {
         Conv2dOptions o;
         o.pad_h = o.pad_w = 1;
         return conv2d(g.parameter("a", {2, 5, 9, 9}, {}), g.parameter("b", {7, 5, 3, 3}, {}), o);
       },
       5 * 9},
      // Channels in quads: Vulkan stages x and the weights channels-last (the copies read 16 bits).
      {"conv2d, channels-last",
       [](Graph& g) {
         Conv2dOptions o;
         o.pad_h = o.pad_w = 1;
         return conv2d(g.parameter("a", {2, 8, 7, 7}, {}), g.parameter("b", {6, 8, 3, 3}, {}), o);
       },
       8 * 9},
      // 1 x 1: one GEMM per image on the GEMM kernel, the weights as A.
      {"conv2d, 1 x 1",
       [](Graph& g) {
         return conv2d(g.parameter("a", {2, 8, 6, 6}, {}), g.parameter("b", {5, 8, 1, 1}, {}));
       },
       8},
  };
}

// Runs `build` on the given session options with the parameters set to `values` (or their
// absolute values), returning "y" (and the plan in `planned`).
std::vector<double> run_product(const Product& p, SessionOptions so,
                                const std::map<std::string, std::vector<double>>& v, bool absolute = false,
                                Program* planned = nullptr) {
  Graph g;
  g.output("y", p.build(g));
  Session s(so);
  s.add(g);
  if (planned) *planned = s.program();
  for (auto& [name, x] : v) {
    std::vector<double> y = x;
    if (absolute)
      for (double& e : y) e = std::abs(e);
    s.set(name, std::span<const double>(y));
  }
  s.run();
  return s.get_f64("y");
}

TEST(Precision, ProductsMeetTheirBoundsOnEveryBackend) {
  const bool vulkan = testing_vulkan::missing_device().empty();
  if (!vulkan) std::printf("Vulkan part skipped: %s\n", testing_vulkan::missing_device().c_str());
  for (const Product& p : products()) {
    Graph shapes;
    p.build(shapes);
    std::map<std::string, std::vector<double>> v;
    std::mt19937 rng(3);
    for (NodeId id : shapes.parameters()) {
      std::vector<double> x(size_t(shapes.node(id).type.numel()));
      for (double& e : x) e = float(std::normal_distribution<double>(0, 1)(rng));  // f32 values: both sides alike
      v[shapes.node(id).name] = x;
    }
    const std::vector<double> exact = run_product(p, {.f64_oracle = true}, v);
    const std::vector<double> s = run_product(p, {.f64_oracle = true}, v, true);
    for (Precision c : {Precision::accelerated, Precision::accelerated_bf16}) {
      SCOPED_TRACE(std::string(p.name) + ", " + std::string(precision_name(c)));
      const double u = std::ldexp(1.0, c == Precision::accelerated ? -11 : -8), e = std::ldexp(1.0, -24);
      const std::vector<double> oracle = run_product(p, {.f64_oracle = true, .precision = c}, v);
      std::vector<std::pair<const char*, std::vector<double>>> f32 = {{"CPU", run_product(p, {.precision = c}, v)}};
      if (vulkan) {
        SessionOptions so = vulkan_options();
        so.precision = c;
        Program planned;
        f32.emplace_back("Vulkan", run_product(p, so, v, false, &planned));
        // Vulkan reads both operands in 16 bits: the bound below checks the unpacking.
        const DType half = c == Precision::accelerated ? DType::f16 : DType::bf16;
        size_t products = 0;
        for (const Dispatch& d : planned.dispatches) {
          if (half_operand_inputs(d.op) == 0) continue;
          ++products;
          for (size_t i = 0; i < 2; ++i) EXPECT_EQ(planned.tensors[d.reads[i]].stored, half) << "operand " << i;
        }
        EXPECT_EQ(products, 1u);
      }
      size_t moved = 0;
      for (size_t i = 0; i < exact.size(); ++i) {
        ASSERT_LE(std::abs(oracle[i] - exact[i]), (2 * u + u * u) * s[i]) << "f64 oracle of the contract at " << i;
        moved += oracle[i] != exact[i];
        for (auto& [where, got] : f32)
          ASSERT_LE(std::abs(got[i] - oracle[i]), double(p.k + 2) * e * s[i]) << where << " at " << i;
      }
      EXPECT_GT(moved, exact.size() / 2) << "the contract left the products unrounded";
    }
  }
}

// The tiled attention (attention_fused): q, k, v rounded, softmax and accumulation in f32.
// Against the f64 oracle of the same contract: |d| <= 1e-5 (1 + |y|) (f32 exponentials and sums
// over 48 keys of values of order 1); against f64 strict the scores move by at most
// delta = (2u + u^2) scale max_ij sum_d |q_id k_jd|, so each output by at most
// (e^(2 delta) - 1 + u) max |v|.
TEST(Precision, TiledAttentionMeetsItsBoundsOnEveryBackend) {
  const int64_t b = 1, h = 2, sq = 48, d = 16;
  const double scale = 0.25;
  Product p{"attention_fused",
            [&](Graph& g) {
              Tensor q = g.parameter("a", {b, h, sq, d}, {}), k = g.parameter("b", {b, h, sq, d}, {}),
                     v = g.parameter("c", {b, h, sq, d}, {});
              return attention_fused_packed(q, k, v, true, scale);
            },
            d};
  std::map<std::string, std::vector<double>> v;
  std::mt19937 rng(9);
  for (const char* name : {"a", "b", "c"}) {
    std::vector<double> x(size_t(b * h * sq * d));
    for (double& e : x) e = float(std::normal_distribution<double>(0, 1)(rng));
    v[name] = x;
  }
  double qk = 0, vmax = 0;
  for (int64_t hh = 0; hh < h; ++hh)
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < sq; ++j) {
        double t = 0;
        for (int64_t c = 0; c < d; ++c)
          t += std::abs(v["a"][size_t((hh * sq + i) * d + c)] * v["b"][size_t((hh * sq + j) * d + c)]);
        qk = std::max(qk, t);
      }
  for (double x : v["c"]) vmax = std::max(vmax, std::abs(x));
  const std::vector<double> exact = run_product(p, {.f64_oracle = true}, v);
  const size_t outputs = size_t(b * h * sq * d);  // the packed output: [out | log-sum-exp]
  for (Precision c : {Precision::accelerated, Precision::accelerated_bf16}) {
    SCOPED_TRACE(precision_name(c));
    const double u = std::ldexp(1.0, c == Precision::accelerated ? -11 : -8);
    const double delta = (2 * u + u * u) * scale * qk;
    const std::vector<double> oracle = run_product(p, {.f64_oracle = true, .precision = c}, v);
    for (size_t i = 0; i < outputs; ++i)
      ASSERT_LE(std::abs(oracle[i] - exact[i]), (std::exp(2 * delta) - 1 + u) * vmax) << "f64 oracle at " << i;
    std::vector<std::pair<const char*, std::vector<double>>> f32 = {{"CPU", run_product(p, {.precision = c}, v)}};
    if (testing_vulkan::missing_device().empty()) {
      SessionOptions so = vulkan_options();
      so.precision = c;
      Program planned;
      f32.emplace_back("Vulkan", run_product(p, so, v, false, &planned));
      // Vulkan reads q, k and v in 16 bits (half.glsl): the tolerance below checks the unpacking.
      const DType half = c == Precision::accelerated ? DType::f16 : DType::bf16;
      for (const Dispatch& d : planned.dispatches) {
        if (d.op != Op::attention_fused) continue;
        for (size_t i = 0; i < 3; ++i) EXPECT_EQ(planned.tensors[d.reads[i]].stored, half) << "operand " << i;
      }
    }
    for (auto& [where, got] : f32)
      for (size_t i = 0; i < outputs; ++i)
        ASSERT_NEAR(got[i], oracle[i], 1e-5 * (1 + std::abs(oracle[i]))) << where << " at " << i;
  }
}

// 16-bit operands (PlanOptions::half_operands, the Vulkan backend): a rounding node's output
// that only GEMMs read is planned as f16 / bf16, written two values a word by half.comp and
// unpacked by the GEMM's loaders. A product with an identity matrix has one non-zero term per
// output, so it returns the rounded operand exactly: the Vulkan results must equal the CPU's
// rounding (checked above against independent conversions) value for value, through the vec4
// and the scalar loads, as A and as B, transposed or not, in both formats, on the kernels for
// CPU-emulated devices and on the shared-memory tiles of GPUs (with an epilogue: + 0).
TEST(Precision, RoundedOperandsTravelIn16BitsOnVulkan) {
  if (!testing_vulkan::missing_device().empty()) {
    GTEST_SKIP() << "skipped: " << testing_vulkan::missing_device();
  }
  const std::vector<float> values = rounding_inputs();
  struct Case {
    const char* name;
    int64_t rows, cols;     // X's shape
    bool x_is_a, trans;     // X as A (X I) or as B (I X, or I X^T)
    bool epilogue = false;  // + a bias of zeros (matmul_epilogue where the kernels fuse it)
  };
  const Case cases[] = {{"A, vec4 loads", 71, 64, true, false},  {"A, scalar loads, odd count", 73, 63, true, false},
                        {"B, vec4 loads", 71, 64, false, false}, {"B, scalar loads", 73, 63, false, false},
                        {"B transposed", 73, 63, false, true},   {"A, with an epilogue", 71, 64, true, false, true}};
  for (auto kernels : {VulkanOptions::Kernels::automatic, VulkanOptions::Kernels::shared_memory})
    for (Precision c : {Precision::accelerated, Precision::accelerated_bf16}) {
      const Op round = c == Precision::accelerated ? Op::round_f16 : Op::round_bf16;
      const DType half = c == Precision::accelerated ? DType::f16 : DType::bf16;
      for (const Case& k : cases) {
        SCOPED_TRACE(std::string(k.name) + ", " + std::string(precision_name(c)) +
                     (kernels == VulkanOptions::Kernels::automatic ? "" : ", shared-memory tiles"));
        const int64_t n = k.rows * k.cols, eye_n = k.x_is_a ? k.cols : (k.trans ? k.cols : k.rows);
        std::vector<float> x(size_t(n), 0.0f);
        for (size_t i = 0; i < x.size(); ++i) x[i] = values[i % values.size()];
        const std::vector<float> want = run_rounding(round, x, {});
        for (size_t i = 0; i < x.size(); ++i)
          if (std::isinf(want[i])) x[i] = 1.0f;  // infinity times the identity's zeros is NaN
        const std::vector<float> rounded = run_rounding(round, x, {});
        std::vector<float> eye(size_t(eye_n * eye_n), 0.0f);
        for (int64_t i = 0; i < eye_n; ++i) eye[size_t(i * eye_n + i)] = 1.0f;
        Graph g;
        Tensor tx = g.parameter("x", {k.rows, k.cols}, {}), ti = g.parameter("eye", {eye_n, eye_n}, {});
        Tensor y0 = k.x_is_a ? matmul(tx, ti) : matmul(ti, tx, false, k.trans);
        g.output("y", k.epilogue ? y0 + g.parameter("zero", {k.cols}, {}) : y0);
        SessionOptions so = vulkan_options();
        so.precision = c;
        so.vulkan_kernels = kernels;
        so.vulkan_profile = true;
        Session s(so);
        s.add(g);
        s.set("x", std::span<const float>(x));
        s.set("eye", std::span<const float>(eye));
        if (k.epilogue) s.set("zero", std::span<const float>(std::vector<float>(size_t(k.cols), 0.0f)));
        s.run();
        const std::vector<float> y = s.get("y");
        ASSERT_EQ(y.size(), x.size());
        for (int64_t r = 0; r < k.rows; ++r)
          for (int64_t col = 0; col < k.cols; ++col) {
            const size_t at = size_t(r * k.cols + col), out = k.trans ? size_t(col * k.rows + r) : at;
            ASSERT_EQ(y[out], rounded[at]) << "x = " << x[at] << " at " << at;
          }
        // The plan: both operands are rounding outputs stored in 16 bits, the product's byte count
        // follows, and nothing else reads them.
        const Program& p = s.program();
        size_t halves = 0, fused = 0;
        for (const Dispatch& d : p.dispatches) {
          fused += d.op == Op::matmul_epilogue;
          if (d.op != Op::matmul && d.op != Op::matmul_epilogue) continue;
          for (size_t i = 0; i < 2; ++i) {
            const ProgramTensor& t = p.tensors[d.reads[i]];
            EXPECT_EQ(t.stored, half);
            EXPECT_EQ(t.bytes, uint64_t(2 * t.type.numel()));
            halves += t.stored == half;
          }
        }
        EXPECT_EQ(halves, 2u);
        EXPECT_EQ(fused, k.epilogue && kernels == VulkanOptions::Kernels::shared_memory ? 1u : 0u);
        // The profile names each dispatch's operand precision; the roundings run on half.comp.
        const VulkanProgramProfile* prof = vulkan_profile(s.backend(), 0);
        ASSERT_NE(prof, nullptr);
        size_t product_launches = 0, packing = 0;
        for (const VulkanLaunchProfile& l : prof->launches) {
          if (l.op == "matmul" || l.op == "matmul_epilogue") {
            ++product_launches;
            EXPECT_EQ(l.operands, dtype_name(half)) << l.kernel;
          } else {
            EXPECT_EQ(l.operands, "f32") << l.op;
          }
          packing += l.kernel == "half";
        }
        EXPECT_GT(product_launches, 0u);
        EXPECT_EQ(packing, 2u);
      }
    }
}

// A rounding the fusion pass folds into its producer's program (here neg, then round_f16):
// the fused kernel writes the 16-bit values itself, two an invocation, an odd count included;
// on the shared-memory GEMM kernels the producer is a GEMM's epilogue (x I + 0, negated,
// rounded), which stores pairs of columns as words.
TEST(Precision, FusedProgramsEndingInARoundingWrite16BitsOnVulkan) {
  if (!testing_vulkan::missing_device().empty()) {
    GTEST_SKIP() << "skipped: " << testing_vulkan::missing_device();
  }
  const std::vector<float> values = rounding_inputs();
  for (bool epilogue : {false, true})
    for (Precision c : {Precision::accelerated, Precision::accelerated_bf16}) {
      SCOPED_TRACE(std::string(precision_name(c)) + (epilogue ? ", GEMM epilogue" : ", elementwise program"));
      const Op round = c == Precision::accelerated ? Op::round_f16 : Op::round_bf16;
      const int64_t rows = 71, cols = epilogue ? 64 : 63;
      std::vector<float> x(size_t(rows * cols));
      for (size_t i = 0; i < x.size(); ++i) x[i] = values[i % values.size()];
      std::vector<float> want = run_rounding(round, x, {});
      for (size_t i = 0; i < x.size(); ++i) {
        if (std::isinf(want[i])) x[i] = want[i] = 1.0f;  // infinity times the identity's zeros is NaN
        want[i] = -want[i];
      }
      std::vector<float> eye(size_t(cols * cols), 0.0f);
      for (int64_t i = 0; i < cols; ++i) eye[size_t(i * cols + i)] = 1.0f;
      Graph g;
      Tensor tx = g.parameter("x", {rows, cols}, {}), te = g.parameter("eye", {cols, cols}, {});
      if (epilogue) tx = matmul(tx, te) + g.parameter("zero", {cols}, {});
      g.output("y", matmul(neg(tx), te));
      SessionOptions so = vulkan_options();
      so.precision = c;
      if (epilogue) so.vulkan_kernels = VulkanOptions::Kernels::shared_memory;
      Session s(so);
      s.add(g);
      s.set("x", std::span<const float>(x));
      s.set("eye", std::span<const float>(eye));
      if (epilogue) s.set("zero", std::span<const float>(std::vector<float>(size_t(cols), 0.0f)));
      s.run();
      const std::vector<float> y = s.get("y");
      for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], want[i]) << "x = " << x[i] << " at " << i;
      size_t fused_half = 0, standalone = 0;
      const Op producer = epilogue ? Op::matmul_epilogue : Op::fused_elementwise;
      for (const Dispatch& d : s.program().dispatches) {
        standalone += d.op == round;
        fused_half += d.op == producer && s.program().tensors[d.write()].stored != DType::f32;
      }
      EXPECT_EQ(fused_half, 1u);                  // -x rounded: one program writing 16 bits
      EXPECT_EQ(standalone, epilogue ? 2u : 1u);  // x's and the identity's roundings
    }
}

// What 16-bit operands save, from the plans alone (no device): in each workload's forward pass
// at ci scale the products (GEMM, convolution, attention) read at most 0.6 times the bytes
// under `accelerated` that they read under `strict` when the backend reads 16-bit operands, and
// exactly as many when it does not (the CPU's plan). Only the roundings' outputs (standalone or
// ending a fused program or a GEMM epilogue) changed storage.
TEST(Precision, SixteenBitOperandsHalveWhatTheForwardProductsRead) {
  auto product_bytes = [](const Program& p) {
    uint64_t b = 0;
    for (const Dispatch& d : p.dispatches)
      if (half_operand_inputs(d.op) > 0) b += p.read_bytes(d);
    return b;
  };
  for (const models::WorkloadInfo& info : models::workload_list()) {
    SCOPED_TRACE(info.id);
    Graph g;
    const models::Workload w = models::build_workload(g, info.id, models::Scale::ci);
    g.output("loss", w.loss);
    for (Precision c : {Precision::accelerated, Precision::accelerated_bf16}) {
      const uint64_t strict = product_bytes(plan(optimize(g), PlanOptions{.half_operands = true}));
      const Graph a = optimize(apply_precision(g, c));
      const uint64_t f32 = product_bytes(plan(a, PlanOptions{}));
      const Program half = plan(a, PlanOptions{.half_operands = true});
      EXPECT_EQ(f32, strict) << precision_name(c);
      EXPECT_LE(double(product_bytes(half)), 0.6 * double(strict)) << precision_name(c);
      for (const ProgramTensor& t : half.tensors) {
        if (t.stored == DType::f16 || t.stored == DType::bf16) {
          EXPECT_EQ(t.stored, c == Precision::accelerated ? DType::f16 : DType::bf16);
          const Op op = a.node(t.node).op;
          EXPECT_TRUE(op == Op::round_f16 || op == Op::round_bf16 || op == Op::fused_elementwise ||
                      op == Op::matmul_epilogue)
              << op_name(op);
        }
      }
    }
  }
}

// The CPU backend plans rounded operands in f32 (its kernels read f32), and a strict plan has
// nothing to store in 16 bits: planning with half_operands set changes only rounding outputs.
TEST(Precision, OnlyRoundingOutputsReadByProductsAreStoredIn16Bits) {
  Graph g;
  Tensor x = g.input("x", {8, 16}), w = g.parameter("w", {16, 4}, {});
  Tensor h = matmul(x, w);
  g.output("y", h);
  g.output("sum", sum(h));  // keeps h an output too
  const Graph a = apply_precision(g, Precision::accelerated);
  auto stored = [](const Program& p, Op op) {
    std::vector<DType> out;
    for (const Dispatch& d : p.dispatches)
      if (d.op == op) out.push_back(p.tensors[d.write()].stored);
    return out;
  };
  const Program half = plan(a, PlanOptions{.half_operands = true});
  EXPECT_EQ(stored(half, Op::round_f16), (std::vector<DType>{DType::f16, DType::f16}));
  EXPECT_EQ(stored(plan(a, PlanOptions{}), Op::round_f16), (std::vector<DType>{DType::f32, DType::f32}));
  // A rounding output something else reads too (here an output of the graph) stays f32.
  Graph b;
  Tensor bx = b.input("x", {8, 16}), bw = b.parameter("w", {16, 4}, {});
  Tensor r = graph_internal::add_node(b, Op::round_f16, NoAttrs{}, {bx.id}, bx.type());
  b.output("y", matmul(r, bw));
  b.output("rounded", r);
  EXPECT_EQ(stored(plan(b, PlanOptions{.half_operands = true}), Op::round_f16), (std::vector<DType>{DType::f32}));
  // Read through a reshape: stored in 16 bits with the view when every reader of the view takes
  // 16-bit operands there, f32 when one does not (here a sum).
  for (bool summed : {false, true}) {
    Graph c;
    Tensor cx = c.input("x", {2, 4, 16}), cw = c.parameter("w", {16, 4}, {});
    Tensor rc = graph_internal::add_node(c, Op::round_f16, NoAttrs{}, {cx.id}, cx.type());
    Tensor flat = reshape(rc, {8, 16});
    c.output("y", matmul(flat, cw));
    if (summed) c.output("s", sum(flat));
    const Program pc = plan(c, PlanOptions{.half_operands = true});
    const DType want = summed ? DType::f32 : DType::f16;
    EXPECT_EQ(stored(pc, Op::round_f16), (std::vector<DType>{want})) << "summed " << summed;
    for (const Dispatch& d : pc.dispatches) {
      if (d.op == Op::matmul) {
        EXPECT_EQ(pc.tensors[d.reads[0]].stored, want) << "the view, summed " << summed;
      }
    }
  }
  // The product's byte count: its two operands at two bytes an element, its result at four.
  for (const Dispatch& d : half.dispatches) {
    if (d.op != Op::matmul) continue;
    EXPECT_DOUBLE_EQ(d.bytes, 2.0 * (8 * 16 + 16 * 4) + 4.0 * 8 * 4);
  }
}

// ---- Weights held in 16 bits (SessionOptions::weights_dtype, PlanOptions::weights_dtype) ----

uint64_t planned_memory(const Program& p) { return p.memory.planned_bytes + p.memory.external_bytes; }

// Held: what only products and embeddings read, directly or reshaped. Kept in f32: what an
// elementwise op or a reduction reads, even when a product reads it too.
TEST(WeightsDtype, PlansHoldWhatOnlyProductsAndEmbeddingsRead) {
  Graph g;
  Tensor x = g.input("x", {4, 8}), ids = g.input("ids", {4}, DType::i32);
  Tensor table = g.parameter("table", {10, 8}, {});  // embedding and tied head
  Tensor w = g.parameter("w", {8, 8}, {});
  Tensor v = g.parameter("v", {2, 4, 8}, {});  // reshaped, then multiplied
  Tensor pos = g.parameter("pos", {4, 8}, {});
  Tensor u = g.parameter("u", {8, 8}, {});  // multiplied and summed
  Tensor b = g.parameter("b", {8}, {});
  Tensor h = embedding(table, ids) + pos + x;
  h = matmul(matmul(h, w) + b, reshape(v, {8, 8}));
  g.output("logits", matmul(matmul(h, u), table, false, true));
  g.output("u_sum", sum(u));
  for (DType f : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(f));
    const Program p = plan(g, PlanOptions{.weights_dtype = f});
    std::map<std::string, DType> stored;
    for (const ExternalBuffer& e : p.externals) stored[e.name] = e.stored;
    const std::map<std::string, DType> want = {{"table", f},
                                               {"w", f},
                                               {"v", f},
                                               {"pos", DType::f32},
                                               {"u", DType::f32},
                                               {"b", DType::f32},
                                               {"x", DType::f32},
                                               {"ids", DType::i32},
                                               {"logits", DType::f32},
                                               {"u_sum", DType::f32}};
    EXPECT_EQ(stored, want);
    for (const ProgramTensor& t : p.tensors) {  // the views of a held weight are held alike
      if (t.binding == "v") {
        EXPECT_EQ(t.stored, f);
      }
    }
    EXPECT_EQ(planned_memory(p) + 2 * (10 * 8 + 8 * 8 + 2 * 4 * 8), planned_memory(plan(g, PlanOptions{})));
  }
  EXPECT_THROW(plan(g, PlanOptions{.weights_dtype = DType::q8_0}), std::invalid_argument);
  EXPECT_THROW(plan(g, PlanOptions{.float_dtype = DType::f64, .weights_dtype = DType::f16}), std::invalid_argument);
  EXPECT_THROW(Session(SessionOptions{.weights_dtype = DType::i32}), std::invalid_argument);
  EXPECT_THROW(Session(SessionOptions{.f64_oracle = true, .weights_dtype = DType::f16}), std::invalid_argument);
  if (testing_vulkan::missing_device().empty()) {
    SessionOptions naive = vulkan_options();
    naive.vulkan_kernels = VulkanOptions::Kernels::naive;
    naive.weights_dtype = DType::f16;
    EXPECT_THROW(Session{naive}, std::invalid_argument);  // its GEMM reads f32 only
  }
}

// Checkpoints stay f32: a session holding its weights in f16 saves the rounded values as f32
// tensors and loads f32 tensors, rounding them as set() does.
TEST(WeightsDtype, CheckpointsStayF32) {
  Graph g;
  Tensor x = g.input("x", {2, 3}), w = g.parameter("w", {3, 5}, {}), b = g.parameter("b", {5}, {});
  g.output("y", matmul(x, w) + b);
  std::vector<float> given(15);
  for (size_t i = 0; i < given.size(); ++i) given[i] = 1.0f / float(3 + i);  // none exact in f16
  const std::string path = ::testing::TempDir() + "held_weights.safetensors";
  Session held(SessionOptions{.weights_dtype = DType::f16});
  held.add(g);
  held.set("w", std::span<const float>(given));
  held.set("b", std::vector<float>(5, 0.1f));
  save_checkpoint(held, path);
  const io::Checkpoint ck = io::read_checkpoint(path);
  ASSERT_EQ(ck.tensors.at("w").dtype, DType::f32);
  std::vector<float> saved(15);
  std::memcpy(saved.data(), ck.tensors.at("w").data.data(), 15 * sizeof(float));
  for (size_t i = 0; i < given.size(); ++i) EXPECT_EQ(saved[i], float(_Float16(given[i]))) << i;
  // The layout still lists the held weight among the parameters.
  EXPECT_NE(ck.metadata.at("layout").find("\"w\""), std::string::npos) << ck.metadata.at("layout");
  Session strict(SessionOptions{}), again(SessionOptions{.weights_dtype = DType::f16});
  strict.add(g);
  strict.set("w", std::span<const float>(given));
  strict.set("b", std::vector<float>(5, 0.1f));
  save_checkpoint(strict, path);
  again.add(g);
  load_checkpoint(again, path);
  EXPECT_EQ(again.buffers().at("w").stored, DType::f16);
  EXPECT_EQ(again.get("w"), saved);
  EXPECT_EQ(again.get("b"), std::vector<float>(5, 0.1f));
  std::remove(path.c_str());
}

// The inference plans of the five workloads (ci scale, forward pass and loss) with their
// weights in 16 bits need at most 0.6 times the memory (arena and buffers) of the f32 plans.
TEST(WeightsDtype, InferencePlansNeedAtMostSixTenthsOfTheMemory) {
  for (const models::WorkloadInfo& info : models::workload_list()) {
    SCOPED_TRACE(info.id);
    Graph g;
    const models::Workload w = models::build_workload(g, info.id, models::Scale::ci);
    for (auto& [name, t] : w.outputs) g.output(name, t);
    g.output("loss", w.loss);
    const Graph o = optimize(g);
    const uint64_t f32 = planned_memory(plan(o, PlanOptions{}));
    for (DType f : {DType::f16, DType::bf16}) {
      const uint64_t held = planned_memory(plan(o, PlanOptions{.weights_dtype = f}));
      EXPECT_LE(double(held), 0.6 * double(f32)) << dtype_name(f) << ": " << held << " of " << f32 << " bytes";
    }
  }
}

// Each workload's forward pass (ci scale) with its weights held in 16 bits, on the CPU and on
// Vulkan, against a run of the same backend and contract given f32 weights rounded on the host
// (the compiler's _Float16 and bf16_nearest above): strict with f16 weights, and each
// accelerated contract with weights in its own 16-bit type, whose products then read the held
// weights as stored (no rounding nodes for them, so the plan holds them). The session must hand
// back exactly the rounded values of what it was given. Both runs then compute one function and
// differ by summation order alone (the CPU multiplies 16-bit weights in its own dot products
// and panels, not the f32 GEMM; Vulkan converts them as it loads): relative L2 <= 1e-5 per
// output, about a hundred times the f32 unit roundoff over these few layers.
TEST(WeightsDtype, ForwardPassesEqualRunsOnRoundedWeightsUnderEachContract) {
  const bool vulkan = testing_vulkan::missing_device().empty();
  if (!vulkan) std::printf("Vulkan part skipped: %s\n", testing_vulkan::missing_device().c_str());
  const std::pair<Precision, DType> cases[] = {{Precision::strict, DType::f16},
                                               {Precision::accelerated, DType::f16},
                                               {Precision::accelerated_bf16, DType::bf16}};
  for (const models::WorkloadInfo& info : models::workload_list()) {
    Graph g;
    const models::Workload w = models::build_workload(g, info.id, models::Scale::ci);
    for (auto& [name, t] : w.outputs) g.output(name, t);
    g.output("loss", w.loss);
    const models::InputValues in = models::synthetic_inputs(w, info.id, 7);
    std::vector<std::pair<const char*, SessionOptions>> backends = {{"CPU", SessionOptions{.seed = 5}}};
    if (vulkan) backends.emplace_back("Vulkan", vulkan_options(5));
    for (auto& [where, base] : backends) {
      for (auto [contract, f] : cases) {
        SCOPED_TRACE(info.id + ", " + where + ", " + std::string(precision_name(contract)) + ", " +
                     std::string(dtype_name(f)));
        SessionOptions so = base;
        so.precision = contract;
        SessionOptions held_options = so;
        held_options.weights_dtype = f;
        Session held(held_options), reference(so);
        held.add(g);
        reference.add(g);
        EXPECT_LT(held.program().memory.external_bytes, reference.program().memory.external_bytes);
        size_t held_weights = 0;
        for (NodeId id : g.parameters()) {
          const std::string& name = g.node(id).name;
          const std::vector<float> given = reference.get(name);  // the seeded values, in f32
          held.set(name, std::span<const float>(given));
          const std::vector<float> back = held.get(name);
          const DType s = held.buffers().at(name).stored;
          held_weights += s == f;
          ASSERT_TRUE(s == f || s == DType::f32) << name;
          for (size_t i = 0; i < given.size(); ++i) {
            const float want = s == DType::f32   ? given[i]
                               : s == DType::f16 ? float(_Float16(given[i]))
                                                 : bf16_nearest(given[i]);
            ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(want)) << name << " at " << i;
          }
          reference.set(name, std::span<const float>(back));
        }
        EXPECT_GT(held_weights, 0u);
        for (Session* s : {&held, &reference}) {
          for (auto& [name, x] : in.floats) s->set(name, std::span<const double>(x));
          for (auto& [name, x] : in.ints) s->set(name, std::span<const int32_t>(x));
          s->run();
        }
        for (auto& [name, id] : g.outputs()) {
          const std::vector<float> a = held.get(name), b = reference.get(name);
          ASSERT_EQ(a.size(), b.size());
          double d2 = 0, b2 = 0;
          for (size_t i = 0; i < a.size(); ++i) {
            ASSERT_TRUE(std::isfinite(a[i])) << name << " at " << i;
            d2 += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
            b2 += double(b[i]) * b[i];
          }
          EXPECT_LE(std::sqrt(d2), 1e-5 * std::sqrt(b2) + 1e-30) << name;
        }
      }
    }
  }
}

// A weight the plan cannot hold (here one that is also summed) leaves every weight to the
// contract's rounding nodes, in f32: the products still read rounded values.
TEST(WeightsDtype, AcceleratedRunsRoundWeightsThePlanCannotHold) {
  Graph g;
  Tensor x = g.input("x", {4, 8});
  Tensor w = g.parameter("w", {8, 6}, Init{Init::normal, 1.0});
  Tensor v = g.parameter("v", {6, 3}, Init{Init::normal, 1.0});
  g.output("y", matmul(matmul(x, w), v));
  g.output("w_sum", sum(w));
  SessionOptions so{.seed = 3, .precision = Precision::accelerated};
  SessionOptions held_options = so;
  held_options.weights_dtype = DType::f16;
  Session held(held_options), reference(so);
  held.add(g);
  reference.add(g);
  EXPECT_EQ(held.buffers().at("w").stored, DType::f32);
  EXPECT_EQ(held.buffers().at("v").stored, DType::f32);
  size_t rounding = 0;
  for (const Dispatch& d : held.program().dispatches) rounding += d.op == Op::round_f16;
  EXPECT_GE(rounding, 2u) << "both weights are rounded by the contract";
  std::vector<double> xs(32);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.7 * double(i)) * 3.1;
  for (Session* s : {&held, &reference}) {
    s->set("x", std::span<const double>(xs));
    s->run();
  }
  const std::vector<float> a = held.get("y"), b = reference.get("y");
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << i;
}

bool is_backward_product(Op op) {
  return op == Op::matmul || op == Op::conv2d_backward_input || op == Op::conv2d_backward_weight ||
         op == Op::attention_fused_backward;
}

// Backward reduced: the gradients' products read rounded operands too, the forward's rounding
// nodes shared where both read the same tensor; only accelerated offers it.
TEST(Precision, ReducedBackwardRoundsTheGradientsProductsToo) {
  for (const char* workload : {"unet", "whisper", "resnet50"}) {
    SCOPED_TRACE(workload);
    Graph g = training_graph([&](Graph& gg) { return models::build_workload(gg, workload, models::Scale::ci).loss; },
                             OptimizerConfig{});
    uint32_t forward_only = 0, both = 0;
    const Graph f = apply_precision(g, Precision::accelerated, &forward_only);
    const Graph a = apply_precision(g, Precision::accelerated, &both, nullptr, Backward::reduced);
    EXPECT_GT(both, forward_only);  // the incoming gradients' roundings
    size_t backward_products = 0, rounded_reads = 0;
    for (NodeId id = 0; id < a.size(); ++id) {
      const Node& n = a.node(id);
      if (is_rounding(n.op)) {
        EXPECT_EQ(n.op, Op::round_f16);
        EXPECT_FALSE(n.pinned);
      }
      if (!n.pinned || !is_backward_product(n.op)) continue;
      ++backward_products;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const Node& in = a.node(n.inputs[i]);
        if (in.type.dtype != DType::f32) continue;
        if (n.op == Op::attention_fused_backward && i == 3) {  // the saved output and log-sum-exp
          EXPECT_FALSE(is_rounding(in.op)) << "attention backward %" << id << " reads its statistics rounded";
          continue;
        }
        EXPECT_EQ(in.op, Op::round_f16) << op_name(n.op) << " %" << id << " input " << i << " is unrounded";
        ++rounded_reads;
      }
    }
    EXPECT_GT(backward_products, 0u);
    EXPECT_GT(rounded_reads, backward_products);
    // One rounding per source and direction: the gradients round what they read anew, so the
    // forward's copies need not live until the backward. A rounding's readers are all forward
    // or all gradients.
    std::map<NodeId, std::set<bool>> directions;  // rounding node -> pinned of its readers
    std::set<std::pair<NodeId, bool>> sources;
    for (NodeId id = 0; id < a.size(); ++id) {
      for (NodeId k : a.node(id).inputs) {
        if (!is_rounding(a.node(k).op)) continue;
        directions[k].insert(a.node(id).pinned);
        sources.insert({a.node(k).inputs[0], a.node(id).pinned});
      }
    }
    for (auto& [k, d] : directions) EXPECT_EQ(d.size(), 1u) << "rounding %" << k << " read by both directions";
    EXPECT_EQ(directions.size(), size_t(both));
    EXPECT_EQ(sources.size(), size_t(both));
    // The update reads no rounded values: it stays f32.
    EXPECT_NE(a.hash(), f.hash());
  }
  Graph g;
  g.output("y", sum(matmul(g.input("x", {2, 3}), g.parameter("w", {3, 2}, {}))));
  for (Precision p : {Precision::strict, Precision::accelerated_bf16}) {
    try {
      apply_precision(g, p, nullptr, nullptr, Backward::reduced);
      FAIL() << precision_name(p) << " accepted a reduced backward";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("backward 'reduced'"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse_backward(backward_name(Backward::reduced)), Backward::reduced);
  EXPECT_THROW(parse_backward("f16"), std::invalid_argument);
}

double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(err / norm);
}

// Normal values (f32-representable) for the named leaves of `g`.
std::map<std::string, std::vector<double>> normal_values(const Graph& g, std::initializer_list<Tensor> leaves,
                                                         uint32_t seed) {
  std::mt19937 rng(seed);
  std::map<std::string, std::vector<double>> values;
  for (Tensor t : leaves) {
    std::vector<double> x(size_t(numel(t.shape())));
    for (double& e : x) e = float(std::normal_distribution<double>(0, 1)(rng));
    values[g.node(t.id).name] = x;
  }
  return values;
}

// Runs `g` under accelerated with backward reduced, returning the outputs `names`.
std::vector<std::vector<double>> run_reduced(const Graph& g, SessionOptions so,
                                             const std::map<std::string, std::vector<double>>& values,
                                             const std::vector<std::string>& names, Program* planned = nullptr) {
  so.precision = Precision::accelerated;
  so.backward = Backward::reduced;
  Session s(so);
  s.add(g);
  if (planned) *planned = s.program();
  for (auto& [name, x] : values) s.set(name, std::span<const double>(x));
  s.run();
  std::vector<std::vector<double>> out;
  for (const std::string& name : names) out.push_back(s.get_f64(name));
  return out;
}

// Backward reduced on Vulkan: both convolution gradients read their rounded operands stored in
// 16 bits, on each of the kernel's paths (gathered scalars, channels-last staging, the 1x1
// matmul, stride phases), and give what the CPU gives from the same rounded values. Products of
// two f16 values are exact in f32, so the two differ by summation order alone: at most
// 2 K 2^-24 times the sum of the terms' magnitudes; 1e-5 relative L2 holds that with room for
// these sizes (K up to 2 x 8 x 8 x 9), and a misread format is off by orders of magnitude.
TEST(Precision, ConvolutionGradientsRead16BitOperandsOnVulkan) {
  if (!testing_vulkan::missing_device().empty()) GTEST_SKIP() << "skipped: " << testing_vulkan::missing_device();
  struct Case {
    const char* name;
    int64_t c, o, k, hw;
    Conv2dOptions opt;
  };
  const std::vector<Case> cases = {
      {"3x3, gathered", 3, 5, 3, 7, {.pad_h = 1, .pad_w = 1}},
      {"3x3, channels-last", 8, 4, 3, 6, {.pad_h = 1, .pad_w = 1}},
      {"1x1", 8, 4, 1, 4, {}},
      {"3x3, stride 2", 4, 8, 3, 8, {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Graph g;
    Tensor x = g.parameter("x", {2, c.c, c.hw, c.hw}, {});
    Tensor w = g.parameter("w", {c.o, c.c, c.k, c.k}, {});
    Tensor y = conv2d(x, w, c.opt);
    Tensor r = g.input("r", y.shape());
    const std::vector<Tensor> grads = grad(sum(y * r), {x, w});
    g.output("gx", grads[0]);
    g.output("gw", grads[1]);
    const auto values = normal_values(g, {x, w, r}, 11);
    Program planned;
    const auto cpu = run_reduced(g, {}, values, {"gx", "gw"});
    const auto vk = run_reduced(g, vulkan_options(), values, {"gx", "gw"}, &planned);
    size_t gradients = 0;
    for (const Dispatch& d : planned.dispatches) {
      if (d.op != Op::conv2d_backward_input && d.op != Op::conv2d_backward_weight) continue;
      ++gradients;
      for (size_t i = 0; i < 2; ++i)
        EXPECT_EQ(planned.tensors[d.reads[i]].stored, DType::f16) << op_name(d.op) << " reads input " << i << " in f32";
    }
    EXPECT_EQ(gradients, 2u);
    EXPECT_LT(rel_l2(vk[0], cpu[0]), 1e-5) << "dx";
    EXPECT_LT(rel_l2(vk[1], cpu[1]), 1e-5) << "dw";
  }
}

// The same for the tiled attention's backward: q, k and v read in 16 bits by the dQ and dK, dV
// kernels. The probabilities are recomputed with each backend's exp, a few ulp apart, on top of
// the summation order: 1e-5 relative L2 again (seen: 3e-7), where a misread format is off by
// orders of magnitude.
TEST(Precision, AttentionGradientsRead16BitOperandsOnVulkan) {
  if (!testing_vulkan::missing_device().empty()) GTEST_SKIP() << "skipped: " << testing_vulkan::missing_device();
  const int64_t b = 1, h = 2, sq = 40, d = 16;
  Graph g;
  Tensor q = g.parameter("q", {b, h, sq, d}, {}), k = g.parameter("k", {b, h, sq, d}, {}),
         v = g.parameter("v", {b, h, sq, d}, {});
  Tensor y = attention_fused_packed(q, k, v, true, 0.25);
  Tensor r = g.input("r", y.shape());
  const std::vector<Tensor> grads = grad(sum(y * r), {q, k, v});
  for (size_t i = 0; i < 3; ++i) g.output("g" + std::to_string(i), grads[i]);
  const auto values = normal_values(g, {q, k, v, r}, 12);
  Program planned;
  const auto cpu = run_reduced(g, {}, values, {"g0", "g1", "g2"});
  const auto vk = run_reduced(g, vulkan_options(), values, {"g0", "g1", "g2"}, &planned);
  size_t backward = 0;
  for (const Dispatch& dd : planned.dispatches) {
    if (dd.op != Op::attention_fused_backward) continue;
    ++backward;
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(planned.tensors[dd.reads[i]].stored, DType::f16) << "operand " << i;
  }
  EXPECT_EQ(backward, 1u);
  for (size_t i = 0; i < 3; ++i) EXPECT_LT(rel_l2(vk[i], cpu[i]), 1e-5) << "gradient " << i;
}

// Loss scaling on the smallest case that overflows: loss = sum(x w), so the gradient arriving at
// the product is the scale itself, and 65536 rounds to infinity in f16 (the largest finite value
// is 65504). dW = round(x)^T round(scale): each column the sum of the f16-rounded x's column,
// exact in f32 (few small terms), times the scale (a power of two).
class LossScalingTest : public testing::TestWithParam<const char*> {
 protected:
  SessionOptions options() const {
    SessionOptions so = std::string(GetParam()) == "vulkan" ? vulkan_options() : SessionOptions{};
    so.precision = Precision::accelerated;
    so.backward = Backward::reduced;
    return so;
  }
  void SetUp() override {
    if (std::string(GetParam()) == "vulkan" && !testing_vulkan::missing_device().empty())
      GTEST_SKIP() << "skipped: " << testing_vulkan::missing_device();
#ifndef __FLT16_MAX__
    GTEST_SKIP() << "skipped: this compiler has no _Float16 to round the reference with";
#else
    for (int i = 0; i < 4 * 3; ++i) x.push_back(0.1 + 0.037 * i);  // none of them an f16 value
    for (int i = 0; i < 3 * 2; ++i) w.push_back(0.5 - 0.25 * i);
    grad_rounded.assign(6, 0);
    grad_exact.assign(6, 0);
    for (int r = 0; r < 4; ++r)
      for (int k = 0; k < 3; ++k)
        for (int c = 0; c < 2; ++c) {
          grad_rounded[size_t(k * 2 + c)] += double(static_cast<_Float16>(float(x[size_t(r * 3 + k)])));
          grad_exact[size_t(k * 2 + c)] += double(float(x[size_t(r * 3 + k)]));
        }
#endif
  }
  static Tensor build(Graph& g) { return sum(matmul(g.input("x", {4, 3}), g.parameter("w", {3, 2}, {}))); }
  void start(Trainer& t) {
    t.session().set("w", std::span<const double>(w));
    t.session().set("x", std::span<const double>(x));
  }
  // Expects w after `updates` SGD steps of lr 1 on the rounded gradient, checking that the
  // rounding made a difference the tolerance can see.
  void expect_weights(Trainer& t, int updates) {
    const std::vector<double> got = t.session().get_f64("w");
    for (size_t i = 0; i < got.size(); ++i) {
      const double want = w[i] - updates * grad_rounded[i];
      EXPECT_NEAR(got[i], want, 1e-6 * std::abs(want) + 1e-6) << "w[" << i << "]";
      if (updates > 0) {
        EXPECT_GT(std::abs(w[i] - updates * grad_exact[i] - want), 1e-4) << "w[" << i << "]";
      }
    }
  }
  OptimizerConfig sgd(int accumulation = 1) const {
    OptimizerConfig c;
    c.kind = OptimizerConfig::Kind::sgd;
    c.lr = 1;
    c.accumulation = accumulation;
    return c;
  }
  std::vector<double> x, w, grad_rounded, grad_exact;
};

TEST_P(LossScalingTest, AnOverflowingUpdateIsSkippedAndHalvesTheScale) {
  Trainer t(build, sgd(), options());
  start(t);
  EXPECT_EQ(t.loss_scale(), 65536);
  t.step();  // dW is infinite: skipped
  EXPECT_EQ(t.skipped_updates(), 1);
  EXPECT_EQ(t.updates(), 0);
  EXPECT_EQ(t.loss_scale(), 32768);
  expect_weights(t, 0);
  t.step();  // 32768 is an f16 value: applied
  EXPECT_EQ(t.skipped_updates(), 1);
  EXPECT_EQ(t.updates(), 1);
  EXPECT_EQ(t.loss_scale(), 32768);
  expect_weights(t, 1);
}

TEST_P(LossScalingTest, FiniteUpdatesInARowDoubleTheScale) {
  Trainer t(build, sgd(), options(), {}, LossScaling{.init = 1024, .growth_interval = 2});
  start(t);
  t.step();
  EXPECT_EQ(t.loss_scale(), 1024);
  t.step();
  EXPECT_EQ(t.loss_scale(), 2048);
  EXPECT_EQ(t.updates(), 2);
  EXPECT_EQ(t.skipped_updates(), 0);
  expect_weights(t, 2);
}

// With accumulation, a skipped update drops its micro-steps' gradients: the next update is the
// mean of its own micro-steps only.
TEST_P(LossScalingTest, ASkippedAccumulatedUpdateDropsItsGradients) {
  Trainer t(build, sgd(2), options());
  start(t);
  t.step();
  t.step();
  EXPECT_EQ(t.skipped_updates(), 1);
  EXPECT_EQ(t.updates(), 0);
  t.step();
  t.step();
  EXPECT_EQ(t.skipped_updates(), 1);
  EXPECT_EQ(t.updates(), 1);
  expect_weights(t, 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, LossScalingTest, testing::Values("cpu", "vulkan"),
                         [](const testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

TEST(LossScaling, IsRefusedWhereItCannotApply) {
  SessionOptions so;
  so.backward = Backward::reduced;  // strict contract
  EXPECT_THROW(Trainer([](Graph& g) { return sum(g.parameter("w", {2}, {})); }, OptimizerConfig{}, so),
               std::invalid_argument);
  so.precision = Precision::accelerated;
  EXPECT_THROW(Trainer([](Graph& g) { return sum(g.parameter("w", {2}, {})); }, OptimizerConfig{}, so, {},
                       LossScaling{.init = 0}),
               std::invalid_argument);
}

}  // namespace
}  // namespace meganeura
