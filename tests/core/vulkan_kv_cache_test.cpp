// The key/value cache on Vulkan (lavapipe in CI), validation layer on: a prefill then decode
// steps through the cache give the rows of causal attention over the whole sequence (the f64
// oracle on the CPU backend); the decode program is recorded once, when it is added, and
// replayed for every step with only the position changed; a position outside the cache is
// refused before the program runs. The op-level cases (GQA, window, prefill at pos > 0) run
// against the oracle in core_vulkan_ops_test (op_cases.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kv_cache_case.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

using testing_vulkan::vulkan_options;

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST(VulkanKvCache, DecodeIsRecordedOnceAndMatchesFullCausalAttention) {
  MEGANEURA_REQUIRE_VULKAN();
  const kv_case::Dims m;
  const int64_t prompt = 5, total = 21;  // 16 decode steps
  const auto q = random_values(size_t(m.b * m.h * total * m.d), 21);
  const auto k = random_values(size_t(m.b * m.hkv * total * m.d), 22);
  const auto v = random_values(size_t(m.b * m.hkv * total * m.d), 23);
  Session oracle(SessionOptions{.device = Device::cpu, .f64_oracle = true});
  testing_vulkan::add_f64_oracle(oracle, kv_case::full_graph(m, total));
  oracle.set("q_all", q);
  oracle.set("k_all", k);
  oracle.set("v_all", v);
  oracle.run();
  const auto y_all = oracle.get_f64("y_all");

  Session gpu(vulkan_options());
  const size_t prefill = gpu.add(kv_case::step_graph(m, prompt));
  const size_t decode = gpu.add(kv_case::step_graph(m, 1));
  auto run_step = [&](size_t program, int64_t t0, int64_t n) {
    gpu.set(kv_case::named("q", n), kv_case::steps(q, m.b * m.h, total, m.d, t0, n));
    gpu.set(kv_case::named("k", n), kv_case::steps(k, m.b * m.hkv, total, m.d, t0, n));
    gpu.set(kv_case::named("v", n), kv_case::steps(v, m.b * m.hkv, total, m.d, t0, n));
    gpu.set("pos", std::vector<int32_t>{int32_t(t0)});
    gpu.run(program);
    const auto y = gpu.get(kv_case::named("y", n));
    std::vector<float> all(y_all.begin(), y_all.end());
    const auto want = kv_case::steps(all, m.b * m.h, total, m.d, t0, n);
    ASSERT_EQ(y.size(), want.size());
    // f32 on the device against f64: rotations with f32 angles (positions below 24, so a
    // few ulp), softmax-weighted averages of values in [-1, 1]: 1e-5 holds with margin, while
    // a position off by one changes rows by 1e-2 or more.
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-5) << "position " << t0 << " element " << i;
  };
  run_step(prefill, 0, prompt);
  run_step(decode, prompt, 1);  // the first step records its uploads and read-back copies
  const Backend::Stats first = gpu.backend().stats();
  for (int64_t t = prompt + 1; t < total; ++t) run_step(decode, t, 1);
  const Backend::Stats last = gpu.backend().stats();
  EXPECT_EQ(last.recordings, first.recordings) << "a decode step recorded command buffers";
  EXPECT_GT(last.submissions, first.submissions);
  // The cache is written in place: no decode dispatch copies it.
  for (const Dispatch& d : gpu.program(decode).dispatches) EXPECT_NE(d.op, Op::copy);
}

TEST(VulkanKvCache, RefusesAPositionOutsideTheCacheBeforeRunning) {
  MEGANEURA_REQUIRE_VULKAN();
  const kv_case::Dims m;
  Session gpu(vulkan_options());
  gpu.add(kv_case::step_graph(m, 3));
  gpu.set(kv_case::named("k", 3), random_values(size_t(m.b * m.hkv * 3 * m.d), 4));
  gpu.set("pos", std::vector<int32_t>{int32_t(m.tmax - 3)});  // the last rows that fit
  gpu.run();
  const auto before = gpu.get("cache.k");
  for (int32_t bad : {int32_t(m.tmax - 2), -2}) {
    gpu.set("pos", std::vector<int32_t>{bad});
    try {
      gpu.run();
      FAIL() << "position " << bad << " was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("position " + std::to_string(bad) + " with 3 new rows"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(gpu.get("cache.k"), before);
  }
}

// Sequences at their own positions on Vulkan, against the formulas in double (kv_cache_case.h):
// f32 angles at positions below 14 and f32 online softmax over averages of values in [-1, 1]:
// 1e-5 holds with margin, while another sequence's position errs by 1e-2 or more. A position
// outside the cache is refused before running, naming the sequence.
TEST(VulkanKvCache, SequencesAtTheirOwnPositions) {
  MEGANEURA_REQUIRE_VULKAN();
  const kv_case::Batch m;
  Session gpu(vulkan_options());
  gpu.add(kv_case::batch_graph(m));
  for (const std::vector<int32_t>& pos : {std::vector<int32_t>{5, -1, 0}, {10, 3, -1}, {0, 7, 2}, {-1, -1, -1}})
    kv_case::check_batch(gpu, m, pos, uint32_t(pos[0] + 50), 1e-5);
  gpu.set("pos", std::vector<int32_t>{3, 11, 0});
  try {
    gpu.run();
    FAIL() << "position 11 with 2 new rows in a cache of 12 was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 1: position 11 with 2"), std::string::npos) << e.what();
  }
}

// A cache longer than one invocation may walk within lavapipe's loop budget (600 positions of
// 64-wide heads: about 80,000 back-edges a row): the attention runs in chunks of positions,
// each launch passing its rows' running state on. Against the f64 oracle, decode and prefill,
// with and without a window, at positions in the last chunk.
TEST(VulkanKvCache, LongCacheAttentionInChunksMatchesTheOracle) {
  MEGANEURA_REQUIRE_VULKAN();
  const int64_t b = 1, h = 4, hkv = 2, tmax = 600, d = 64;
  struct Step {
    int64_t s, pos, window;
  };
  for (const Step& st : {Step{1, 590, 0}, Step{3, 500, 0}, Step{1, 599, 100}}) {
    Graph g;
    Tensor q = g.input("q", {b, h, st.s, d});
    Tensor k = g.input("k", {b, hkv, tmax, d});
    Tensor v = g.input("v", {b, hkv, tmax, d});
    Tensor pos = g.input("pos", {1}, DType::i32);
    g.output("y", cached_attention(q, k, v, pos, st.window));
    Session oracle(SessionOptions{.device = Device::cpu, .f64_oracle = true});
    testing_vulkan::add_f64_oracle(oracle, g);
    Session gpu(vulkan_options());
    gpu.add(g);
    size_t launches = 0;
    for (const Dispatch& dp : gpu.program().dispatches) launches += dp.op == Op::cached_attention;
    ASSERT_EQ(launches, 1u);
    for (Session* sess : {&oracle, &gpu}) {
      sess->set("q", random_values(size_t(b * h * st.s * d), 31));
      sess->set("k", random_values(size_t(b * hkv * tmax * d), 32));
      sess->set("v", random_values(size_t(b * hkv * tmax * d), 33));
      sess->set("pos", std::vector<int32_t>{int32_t(st.pos)});
      sess->run();
    }
    // 600 positions at 131 back-edges each in chunks under 32,768: three launches on lavapipe
    // (one on a GPU, whose budget is 2^24).
    if (gpu.device_name().find("llvmpipe") != std::string::npos) {
      EXPECT_GE(gpu.backend().stats().dispatches, 3u);
    }
    std::printf("%s: %llu launches\n", gpu.device_name().c_str(),
                static_cast<unsigned long long>(gpu.backend().stats().dispatches));
    const auto got = gpu.get("y");
    const auto want = oracle.get_f64("y");
    ASSERT_EQ(got.size(), want.size());
    // f32 online softmax over up to 600 positions against f64: relative error of order
    // 600 * 6e-8 on averages of values in [-1, 1], about 4e-5 at worst; 1e-4 leaves margin,
    // while a chunk's state lost or counted twice errs by 1e-2 or more.
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4) << "s " << st.s << " pos " << st.pos << " window " << st.window << " element "
                                         << i;
  }
}

// The Llama decoder (SmolLM2's ci-scale configuration) decoding 16 tokens greedily on Vulkan
// through the cache gives the tokens of recomputing the whole window on the CPU backend with
// the same weights (copied over).
TEST(VulkanKvCache, DecoderGreedyTokensMatchTheCpuWindow) {
  MEGANEURA_REQUIRE_VULKAN();
  const kv_case::Lm c;
  const std::vector<int32_t> prompt = {1, 17, 300, 42};
  const int64_t total = int64_t(prompt.size()) + 16;
  Session cpu(SessionOptions{.seed = 3});
  const size_t full = cpu.add(kv_case::lm_graph(c, total, false, 0));
  Session gpu(vulkan_options());
  const size_t prefill = gpu.add(kv_case::lm_graph(c, int64_t(prompt.size()), true, total));
  const size_t decode = gpu.add(kv_case::lm_graph(c, 1, true, total));
  cpu.initialise();
  for (const auto& [name, b] : cpu.buffers())
    if (b.role == Role::parameter) gpu.write_raw(name, cpu.read_raw(name));
  const kv_case::Greedy window = kv_case::greedy_full(cpu, full, c, prompt, total);
  const kv_case::Greedy cached = kv_case::greedy_cached(gpu, prefill, decode, c, prompt, total);
  EXPECT_EQ(cached.tokens, window.tokens);
  // f32 on both sides, different kernels and summation orders: logits of order one a few
  // 1e-6 apart; 1e-4 bounds that, and every top-1 margin exceeds twice it (checked), so equal
  // tokens are not luck.
  const double worst = kv_case::largest_difference(cached, window);
  EXPECT_LT(worst, 1e-4);
  EXPECT_GT(window.margin, 2e-4);
  std::printf("largest logit difference %.3g, smallest top-1 margin %.3g\n", worst, double(window.margin));
}

}  // namespace
}  // namespace meganeura
