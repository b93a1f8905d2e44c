// Weights in block formats (q8_0, q4_0), f16 or bf16 multiplied where they are decoded (matmul_q):
// - the CPU kernels, each path this CPU runs (AVX-512, AVX2, scalar; a path the CPU lacks is
//   skipped naming it), against a float64 product of the decoded weights, for decode-sized
//   (dot products) and prefill-sized (decoded panels and the GEMM) row counts and odd sizes;
// - the op in a graph: its output, the weight's bytes, autodiff's refusal, a row length that
//   is no whole number of blocks; the Vulkan kernels (decode and prefill row counts, each GEMM
//   family) against the CPU's on the same blocks, and their planned loops;
// - a Generator holding its weights in Q8_0 / Q4_0 against an f32 one given the same rounded
//   weights (tied and untied heads), from memory and from a GGUF file (a file's blocks are set
//   without changing).
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <span>

#include "backend/cpu/quant_gemm.h"
#include "backend/vulkan/lowering.h"
#include "meganeura/autodiff.h"
#include "meganeura/generate.h"
#include "meganeura/gguf.h"
#include "meganeura/passes.h"
#include "meganeura/workloads.h"
#include "models/gguf_model.h"
#include "small_llama.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

io::GgmlType ggml(DType t) { return t == DType::q8_0 ? io::GgmlType::q8_0 : io::GgmlType::q4_0; }

std::vector<float> normal(size_t n, unsigned seed, double std = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0, std);
  std::vector<float> v(n);
  for (float& x : v) x = float(d(rng));
  return v;
}

std::vector<float> decoded(DType t, const std::vector<std::byte>& blocks, size_t n) {
  std::vector<float> w(n);
  io::dequantize(uint32_t(ggml(t)), blocks, w);
  return w;
}

struct Case {
  int64_t m, n, k;
};
// Up to 4 rows take dot products; more go through panels, a panel per thread (the last one
// short) or, past 4 MB a panel (n = 4096, k = 640), panels of 64 rows.
const Case kCases[] = {{1, 1, 32},   {1, 70, 96},   {3, 5, 576},    {4, 130, 64},
                       {5, 67, 160}, {37, 130, 96}, {128, 200, 64}, {5, 4096, 640}};

void kernel_matches_f64(cpu::QuantIsa isa) {
  if (int(isa) > int(cpu::quant_isa_supported()))
    GTEST_SKIP() << "this CPU cannot run the " << cpu::quant_isa_name(isa) << " path";
  cpu::force_quant_isa(isa);
  // f16 and bf16 rows also of lengths that are no multiple of a vector (the kernels' tails).
  std::vector<Case> half_cases(std::begin(kCases), std::end(kCases));
  half_cases.insert(half_cases.end(), {{1, 9, 17}, {3, 5, 23}, {6, 7, 45}});
  for (DType t : {DType::q8_0, DType::q4_0, DType::f16, DType::bf16}) {
    const bool half = t == DType::f16 || t == DType::bf16;
    for (const Case& c : half ? std::span<const Case>(half_cases) : std::span<const Case>(kCases)) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                   " k=" + std::to_string(c.k));
      const std::vector<float> x = normal(size_t(c.m * c.k), 1), w = normal(size_t(c.n * c.k), 2, 0.1);
      std::vector<std::byte> blocks;
      std::vector<float> wd;
      if (half) {  // the bits of _Float16(w), or w's upper 16 bits (bf16 by truncation): exact values
        blocks.resize(2 * w.size());
        for (size_t i = 0; i < w.size(); ++i) {
          const uint16_t h =
              t == DType::f16 ? std::bit_cast<uint16_t>(_Float16(w[i])) : uint16_t(std::bit_cast<uint32_t>(w[i]) >> 16);
          std::memcpy(blocks.data() + 2 * i, &h, 2);
          wd.push_back(t == DType::f16 ? float(_Float16(w[i])) : std::bit_cast<float>(uint32_t(h) << 16));
        }
      } else {
        blocks = io::quantize(ggml(t), w);
        wd = decoded(t, blocks, w.size());
      }
      std::vector<float> y(size_t(c.m * c.n));
      cpu::matmul_q(t, x.data(), blocks.data(), y.data(), c.m, c.n, c.k);
      std::vector<double> xd(x.begin(), x.end()), yd(y.size());
      cpu::matmul_q(t, xd.data(), blocks.data(), yd.data(), c.m, c.n, c.k);
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          double ref = 0, mag = 0;
          for (int64_t p = 0; p < c.k; ++p) {
            ref += double(x[size_t(i * c.k + p)]) * wd[size_t(j * c.k + p)];
            mag += std::abs(double(x[size_t(i * c.k + p)]) * wd[size_t(j * c.k + p)]);
          }
          // f32 sums of k products in any order: |error| <= k u sum|x w| (u = 2^-24), twice
          // for the per-block scaling; the f64 oracle path is exact to 1e-12 of the magnitude.
          const double bound = 2.0 * double(c.k) * std::ldexp(1.0, -24) * mag + 1e-30;
          ASSERT_LE(std::abs(y[size_t(i * c.n + j)] - ref), bound) << "row " << i << " col " << j;
          ASSERT_LE(std::abs(yd[size_t(i * c.n + j)] - ref), 1e-12 * mag + 1e-300) << "row " << i << " col " << j;
        }
    }
  }
  cpu::force_quant_isa(std::nullopt);
}

TEST(QuantMatmul, Avx512MatchesF64) { kernel_matches_f64(cpu::QuantIsa::avx512); }
TEST(QuantMatmul, Avx2MatchesF64) { kernel_matches_f64(cpu::QuantIsa::avx2); }
TEST(QuantMatmul, ScalarMatchesF64) { kernel_matches_f64(cpu::QuantIsa::scalar); }

TEST(QuantMatmul, OpInAGraphStoresBlocksAndRefusesWhatItCannotDo) {
  for (DType t : {DType::q8_0, DType::q4_0}) {
    Graph g;
    Tensor x = g.input("x", {2, 3, 64});
    Tensor w = g.parameter("w", {48, 64}, Init{Init::normal, 0.1}, t);
    g.output("y", matmul_q(x, w));
    Session s;
    s.add(g);
    EXPECT_EQ(storage_bytes(s.buffers().at("w").stored, 48 * 64), uint64_t(48 * 2 * (t == DType::q8_0 ? 34 : 18)));
    EXPECT_EQ(s.read_raw("w").size(), storage_bytes(t, 48 * 64));
    const std::vector<float> xv = normal(6 * 64, 3), wv = normal(48 * 64, 4, 0.1);
    s.set("x", xv);
    s.set("w", wv);
    const std::vector<float> wd = s.get("w");  // the weight as stored: rounded
    EXPECT_EQ(wd, decoded(t, io::quantize(ggml(t), wv), wv.size()));
    s.run();
    const std::vector<float> y = s.get("y");
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 48; ++j) {
        double ref = 0, mag = 0;
        for (int64_t p = 0; p < 64; ++p)
          ref += double(xv[size_t(i * 64 + p)]) * wd[size_t(j * 64 + p)],
              mag += std::abs(double(xv[size_t(i * 64 + p)]) * wd[size_t(j * 64 + p)]);
        ASSERT_NEAR(y[size_t(i * 48 + j)], ref, 128 * std::ldexp(1.0, -24) * mag);
      }
  }
  auto message = [](auto f) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Graph g;
  Tensor x = g.input("x", {2, 64});
  EXPECT_NE(message([&] {
              matmul_q(x, g.parameter("f", {8, 64}, Init{Init::normal, 0.1}));
            }).find("the weight must be of a block type (q8_0, q4_0), got f32"),
            std::string::npos);
  EXPECT_NE(message([&] {
              g.parameter("odd", {8, 40}, Init{Init::normal, 0.1}, DType::q8_0);
            }).find("32"),
            std::string::npos);
  Tensor w = g.parameter("w", {8, 64}, Init{Init::normal, 0.1}, DType::q8_0);
  EXPECT_NE(message([&] {
              matmul_q(g.input("x2", {2, 32}), w);
            }).find("needs x [..., k] and a weight [n, k]"),
            std::string::npos);
  Tensor loss = sum(matmul_q(x, w));
  EXPECT_NE(message([&] { grad(loss, {x}); }).find("matmul_q"), std::string::npos);
}

// Vulkan against the CPU kernels on the same blocks, with each GEMM family forced and the blocks
// read through 8-bit storage (where the device has it; lavapipe does) or from words: decode row
// counts on matmul_q.comp, prefill row counts on the GEMM core (matmul_q_gemm.comp; K split
// across workgroups for the long rows), weights whose bytes end inside a word.
TEST(QuantMatmul, VulkanMatchesTheCpu) {
  MEGANEURA_REQUIRE_VULKAN();
  std::vector<Case> cases(std::begin(kCases), std::end(kCases));
  cases.push_back({16, 40, 2048});
  for (VulkanOptions::Kernels family :
       {VulkanOptions::Kernels::direct, VulkanOptions::Kernels::shared_memory, VulkanOptions::Kernels::naive})
    for (bool bytes : {true, false})
      for (DType t : {DType::q8_0, DType::q4_0}) {
        for (const Case& c : cases) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " family " + std::to_string(int(family)) +
                       (bytes ? " bytes" : " words") + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                       " k=" + std::to_string(c.k));
          Graph g;
          g.output("y", matmul_q(g.input("x", {c.m, c.k}), g.parameter("w", {c.n, c.k}, Init{Init::normal, 0.1}, t)));
          SessionOptions o = testing_vulkan::vulkan_options();
          o.vulkan_kernels = family;
          o.vulkan_byte_storage = bytes;
          Session cpu, gpu(o);
          cpu.add(g);
          gpu.add(g);
          const std::vector<float> x = normal(size_t(c.m * c.k), 5), w = normal(size_t(c.n * c.k), 6, 0.1);
          for (Session* s : {&cpu, &gpu}) s->set("x", x), s->set("w", w), s->run();
          ASSERT_EQ(gpu.read_raw("w"), cpu.read_raw("w"));
          const std::vector<float> a = cpu.get("y"), b = gpu.get("y");
          const std::vector<float> wd = cpu.get("w");
          for (int64_t i = 0; i < c.m; ++i)
            for (int64_t j = 0; j < c.n; ++j) {
              double mag = 0;
              for (int64_t p = 0; p < c.k; ++p)
                mag += std::abs(double(x[size_t(i * c.k + p)]) * wd[size_t(j * c.k + p)]);
              // two f32 sums in different orders: each within k u sum|x w| of the exact value
              ASSERT_LE(std::abs(a[size_t(i * c.n + j)] - b[size_t(i * c.n + j)]),
                        4.0 * double(c.k) * std::ldexp(1.0, -24) * mag + 1e-30)
                  << "row " << i << " col " << j;
            }
        }
      }
}

// Planning only, for a CPU-emulated device's limits and a discrete GPU's (with and without 8-bit
// storage: the kernels' byte-reading variants): up to 7 rows an output
// per invocation (matmul_q.comp), from 8 rows the GEMM core (matmul_q_gemm.comp) unless the
// naive family is forced; every launch within the loop budget, K of SmolLM2's down projection
// and a K long enough to need splits for the budget alone.
TEST(QuantMatmul, VulkanLaunchesPlanTheirLoops) {
  const VulkanDeviceInfo cpu = testing_vulkan::lavapipe_like_device(), gpu = testing_vulkan::gpu_like_device();
  VulkanDeviceInfo gpu8 = gpu;
  gpu8.name = "gpu-like with 8-bit storage";
  gpu8.storage8 = true;
  for (const VulkanDeviceInfo& info : {cpu, gpu, gpu8})
    for (VulkanOptions::Kernels family : {VulkanOptions::Kernels::automatic, VulkanOptions::Kernels::naive})
      for (int64_t m : {1, 7, 8, 128})
        for (int64_t k : {1536, 1 << 19}) {
          const std::string what = info.name + (family == VulkanOptions::Kernels::naive ? " naive" : "") +
                                   " m=" + std::to_string(m) + " k=" + std::to_string(k);
          Graph g;
          g.output("y",
                   matmul_q(g.input("x", {m, k}), g.parameter("w", {64, k}, Init{Init::normal, 0.1}, DType::q8_0)));
          const Program p = plan(optimize(g), PlanOptions{});
          const vk::DeviceClass dc = vk::device_class(info, family);
          const std::vector<vk::Launch> launches = vk::lower_program(p, dc);
          ASSERT_FALSE(launches.empty()) << what;
          const bool gemm = m >= 8 && family != VulkanOptions::Kernels::naive;
          const vk::Kernel want = info.storage8 ? (gemm ? vk::Kernel::matmul_q_gemm_bytes : vk::Kernel::matmul_q_bytes)
                                                : (gemm ? vk::Kernel::matmul_q_gemm : vk::Kernel::matmul_q);
          EXPECT_EQ(launches[0].kernel, want) << what;
          for (const vk::Launch& l : launches) {
            EXPECT_GT(l.loop_iterations, 0u) << what;
            EXPECT_LE(l.loop_iterations, dc.loop_budget) << what;
          }
          if (gemm && k == (1 << 19)) {
            EXPECT_EQ(launches.size(), 2u) << what << ": K split, then its reduction";
          }
        }
}

// The f32 generator given each weight as the block format rounds it.
void set_rounded(Generator& f32, const std::map<std::string, std::vector<float>>& weights, DType t) {
  for (const auto& [name, v] : weights) {
    const bool matrix = name.find("norm") == std::string::npos;
    std::vector<float> r = v;
    if (t == DType::f16) {
      for (float& x : r) x = float(_Float16(x));  // the compiler's IEEE half: nearest, ties to even
    } else {
      r = decoded(t, io::quantize(ggml(t), v), v.size());
    }
    f32.session().set(name, matrix ? r : v);
  }
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) e += std::pow(double(a[i]) - b[i], 2), n += double(b[i]) * b[i];
  return std::sqrt(e / n);
}

TEST(QuantMatmul, GeneratorInBlockFormatsEqualsF32OnRoundedWeights) {
  for (bool tied : {false, true})
    for (DType t : {DType::q8_0, DType::q4_0, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (tied ? " tied" : " untied"));
      models::LlamaConfig c = testing::small_llama_config();
      c.tie_word_embeddings = tied;
      Generator q(c, {.max_context = 64, .prefill_chunk = 16, .weights = t}),
          f(c, {.max_context = 64, .prefill_chunk = 16});
      const auto weights = testing::residual_scaled_weights(q.session(), 3);
      for (const auto& [name, v] : weights) q.session().set(name, v);
      set_rounded(f, weights, t);
      uint64_t stored = 0, f32 = 0;
      for (const auto& [name, b] : q.session().buffers())
        if (b.role == Role::parameter) stored += storage_bytes(b.stored, b.type.numel()), f32 += 4 * b.type.numel();
      // The norms stay f32: the embedding, the 14 projections and the head shrink.
      const uint64_t matrices = 2 * (64 * 64 * 2 + 32 * 64 * 2 + 96 * 64 * 3) + (tied ? 1 : 2) * 320 * 64;
      EXPECT_EQ(f32 - stored, matrices * 4 - storage_bytes(t, int64_t(matrices)));
      std::vector<int32_t> ids = {3, 141, 59, 265, 35, 89, 79, 23, 84, 7, 11, 5, 300, 2, 1, 0, 42};  // a chunk and one
      for (int step = 0; step < 12; ++step) {
        const std::vector<float> a = q.feed(ids), b = f.feed(ids);
        // Same rounded values, other summation orders (dot products against the GEMM).
        ASSERT_LT(rel_l2(a, b), 2e-5) << "step " << step;
        ids = {int32_t(std::max_element(b.begin(), b.end()) - b.begin())};
      }
    }
}

// The same generator on Vulkan (matmul_q.comp, the embedding's rows gathered from its blocks).
TEST(QuantMatmul, VulkanGeneratorInBlockFormatsEqualsTheCpu) {
  MEGANEURA_REQUIRE_VULKAN();
  const models::LlamaConfig c = testing::small_llama_config();
  for (DType t : {DType::q8_0, DType::q4_0, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    Generator cpu(c, {.max_context = 32, .prefill_chunk = 8, .weights = t}),
        gpu(c, {.max_context = 32, .prefill_chunk = 8, .weights = t, .session = testing_vulkan::vulkan_options()});
    for (const auto& [name, v] : testing::residual_scaled_weights(cpu.session(), 6))
      cpu.session().set(name, v), gpu.session().set(name, v);
    std::vector<int32_t> ids = {3, 141, 59, 265, 35, 89, 79, 23, 84, 7, 11};
    for (int step = 0; step < 6; ++step) {
      const std::vector<float> a = cpu.feed(ids), b = gpu.feed(ids);
      ASSERT_LT(rel_l2(b, a), 2e-5) << "step " << step;
      ids = {int32_t(std::max_element(a.begin(), a.end()) - a.begin())};
    }
  }
}

// quantise_weights on the five workloads' forward graphs at CI scale: every linear weight with
// rows of whole blocks (and only those) is held in Q8_0 and read by matmul_q; the outputs
// equal those of the f32 graph given the same weights rounded through Q8_0 (the same products
// in other summation orders: 1e-5 relative L2); a graph with gradients keeps f32 weights
// (its gradients read W untransposed); keep_f32 keeps a weight; only block formats are taken.
TEST(QuantMatmul, QuantiseWeightsHoldsLinearLayersInBlocks) {
  for (const models::WorkloadInfo& info : models::workload_list()) {
    SCOPED_TRACE(info.id);
    Graph g;
    models::Workload w = models::build_workload(g, info.id, models::Scale::ci);
    for (auto& [name, t] : w.outputs) g.output(name, t);
    g.output("loss", w.loss);
    const Graph q = quantise_weights(g, DType::q8_0);
    size_t linear = 0, products = 0;
    std::set<std::string> held;
    for (NodeId id : g.parameters()) {
      const Node& n = g.node(id);
      bool only_transposed_rhs = n.type.shape.size() == 2 && n.type.shape[1] % 32 == 0;
      bool used = false;
      for (NodeId c = 0; c < g.size(); ++c) {
        const Node& m = g.node(c);
        for (size_t slot = 0; slot < m.inputs.size(); ++slot) {
          if (m.inputs[slot] != id) continue;
          used = true;
          only_transposed_rhs = only_transposed_rhs && m.op == Op::matmul && slot == 1 &&
                                std::get<MatmulAttrs>(m.attrs).trans_b && !std::get<MatmulAttrs>(m.attrs).trans_a;
        }
      }
      const bool want = used && only_transposed_rhs;
      const DType got = q.node(*q.find(n.name)).type.dtype;
      EXPECT_EQ(got, want ? DType::q8_0 : n.type.dtype) << n.name;
      linear += want;
      if (want) held.insert(n.name);
    }
    for (NodeId c = 0; c < q.size(); ++c) products += q.node(c).op == Op::matmul_q;
    EXPECT_GE(products, linear);
    std::printf("%s: %zu of %zu parameters in Q8_0, %zu matmul_q\n", info.id.c_str(), linear, g.parameters().size(),
                products);
    if (info.id == "smollm2") {
      EXPECT_GT(linear, 0u);
    }
    Session fq, f32;
    fq.add(q);
    f32.add(g);
    for (NodeId id : g.parameters()) {
      const Node& n = g.node(id);
      if (!f32.buffers().count(n.name)) continue;
      const std::vector<float> v = f32.get(n.name);
      fq.set(n.name, v);
      if (held.count(n.name)) {
        f32.set(n.name, decoded(DType::q8_0, io::quantize(io::GgmlType::q8_0, v), v.size()));
      }
    }
    const models::InputValues in = models::synthetic_inputs(w, info.id, 3);
    for (Session* s : {&fq, &f32}) {
      for (auto& [name, x] : in.floats) s->set(name, std::span<const double>(x));
      for (auto& [name, x] : in.ints) s->set(name, std::span<const int32_t>(x));
      s->run();
    }
    for (auto& [name, t] : w.outputs) EXPECT_LT(rel_l2(fq.get(name), f32.get(name)), 1e-5) << name;
    EXPECT_LT(rel_l2(fq.get("loss"), f32.get("loss")), 1e-5);
  }
  Graph g;
  models::Workload w = models::build_workload(g, "smollm2", models::Scale::ci);
  std::vector<Tensor> params;
  for (NodeId id : g.parameters()) params.push_back(g.tensor(id));
  const std::vector<Tensor> grads = grad(w.loss, params);
  for (size_t i = 0; i < grads.size(); ++i) g.output("grad." + std::to_string(i), grads[i]);
  const Graph trained = quantise_weights(g, DType::q4_0);
  for (NodeId id : trained.parameters()) EXPECT_EQ(trained.node(id).type.dtype, DType::f32);
  Graph f;
  models::Workload fw = models::build_workload(f, "smollm2", models::Scale::ci);
  f.output("loss", fw.loss);
  const Graph kept = quantise_weights(f, DType::q4_0, [](const std::string& n) { return n.find("q_proj") != n.npos; });
  size_t q4 = 0;
  for (NodeId id : kept.parameters()) {
    const Node& n = kept.node(id);
    if (n.name.find("q_proj") != std::string::npos) {
      EXPECT_EQ(n.type.dtype, DType::f32) << n.name;
    }
    q4 += n.type.dtype == DType::q4_0;
  }
  EXPECT_GT(q4, 0u);
  try {
    (void)quantise_weights(f, DType::f16);
    ADD_FAILURE() << "f16 taken as a block format";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("f16 is not a block format"), std::string::npos) << e.what();
  }
}

TEST(QuantMatmul, GgufBlocksLoadUnchanged) {
  const models::LlamaConfig c = testing::small_llama_config();
  Generator f(c, {.max_context = 32, .prefill_chunk = 8});
  const auto weights = testing::residual_scaled_weights(f.session(), 4);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("meganeura-quant-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (DType t : {DType::q8_0, DType::q4_0}) {
    SCOPED_TRACE(dtype_name(t));
    std::map<std::string, io::TensorRecord> records;
    for (const auto& [name, v] : weights) {
      io::TensorRecord& r = records[name];
      r.shape = f.session().buffers().at(name).type.shape;
      r.data.resize(v.size() * 4);
      std::memcpy(r.data.data(), v.data(), r.data.size());
    }
    const std::filesystem::path file = dir / (std::string(dtype_name(t)) + ".gguf");
    models::write_llama_gguf(file, c, records, {.type = ggml(t), .overrides = {}, .metadata = {}});
    Generator q(c, {.max_context = 32, .prefill_chunk = 8, .weights = t}),
        g(c, {.max_context = 32, .prefill_chunk = 8});
    q.load_weights(file);
    g.load_weights(file);
    // The blocks the generator holds are the file's, byte for byte.
    const io::GgufMap map(file);
    EXPECT_EQ(
        q.session().read_raw("model.layers.1.mlp.down_proj.weight"),
        std::vector<std::byte>(map.data("blk.1.ffn_down.weight").begin(), map.data("blk.1.ffn_down.weight").end()));
    const std::vector<int32_t> ids = {3, 141, 59, 265};
    EXPECT_LT(rel_l2(q.feed(ids), g.feed(ids)), 2e-5);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace meganeura
