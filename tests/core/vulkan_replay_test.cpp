// Record once, replay: a training step's command buffers are recorded when the program is
// added; later steps only upload inputs and resubmit. Replayed results must equal those of a
// freshly recorded step bit for bit (same kernels, same order). Barriers come only from the
// plan's hazards.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "meganeura/passes.h"
#include "meganeura/train.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

using testing_vulkan::vulkan_options;

Tensor mlp_loss(Graph& g) {
  Tensor x = g.input("x", {8, 6});
  Tensor t = g.input("t", {8}, DType::i32);
  Tensor w1 = g.parameter("w1", {6, 16}, Init{Init::normal, 0.4});
  Tensor b1 = g.parameter("b1", {16}, Init{});
  Tensor w2 = g.parameter("w2", {16, 4}, Init{Init::normal, 0.4});
  return cross_entropy(matmul(gelu(matmul(x, w1) + b1), w2), t);
}

OptimizerConfig adam() {
  OptimizerConfig o;
  o.kind = OptimizerConfig::Kind::adam;
  o.lr = 0.01;
  o.clip_norm = 1.0;   // clip_coef in the step
  o.warmup_steps = 3;  // lr_schedule in the step
  return o;
}

void feed(Session& s, int step) {
  std::vector<float> x(48);
  std::vector<int32_t> t(8);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(double(i * 7 + size_t(step) * 13)));
  for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t((i + size_t(step)) % 4);
  s.set("x", std::span<const float>(x));
  s.set("t", std::span<const int32_t>(t));
}

std::map<std::string, std::vector<std::byte>> snapshot(const Session& s) {
  std::map<std::string, std::vector<std::byte>> m;
  for (auto& [name, b] : s.buffers()) m[name] = s.read_raw(name);
  return m;
}

TEST(VulkanReplay, StepsAfterTheFirstRecordNothingAndMatchFreshRecordings) {
  MEGANEURA_REQUIRE_VULKAN();
  Trainer a(mlp_loss, adam(), vulkan_options(3));
  feed(a.session(), 0);
  a.step();
  auto before = snapshot(a.session());  // also records the read-back copies
  const Backend::Stats first = a.session().backend().stats();
  EXPECT_GT(first.recordings, 0u);
  for (int step = 1; step <= 4; ++step) {
    // A fresh session at the same state records its step from scratch.
    Session fresh(vulkan_options(99));
    fresh.add(a.session().program(0));
    for (auto& [name, bytes] : before) fresh.write_raw(name, bytes);
    feed(fresh, step);
    fresh.run();
    feed(a.session(), step);
    a.step();
    auto after = snapshot(a.session());
    for (auto& [name, bytes] : after) {
      auto got = fresh.read_raw(name);
      ASSERT_EQ(got.size(), bytes.size()) << name;
      EXPECT_EQ(std::memcmp(got.data(), bytes.data(), got.size()), 0)
          << "step " << step << ": '" << name << "' differs between replay and a fresh recording";
    }
    before = std::move(after);
  }
  const Backend::Stats last = a.session().backend().stats();
  EXPECT_EQ(last.recordings, first.recordings) << "a replayed step recorded command buffers";
  EXPECT_GT(last.submissions, first.submissions);
  // Barriers only on hazards: fewer than dispatches (independent dispatches share one), and
  // at least the trailing one that publishes the step.
  EXPECT_GE(last.barriers, 1u);
  EXPECT_LT(last.barriers, last.dispatches);
  std::printf("mlp step: %llu dispatches, %llu barriers\n", static_cast<unsigned long long>(last.dispatches),
              static_cast<unsigned long long>(last.barriers));
}

TEST(VulkanReplay, ChunkedSubmissionGivesTheSameResults) {
  MEGANEURA_REQUIRE_VULKAN();
  Graph g;
  Tensor loss = mlp_loss(g);
  g.output("loss", loss);
  Session one(vulkan_options(5));
  one.add(g);
  feed(one, 0);
  one.run();
  // Chunks come from the backend options; the session's defaults use one.
  VulkanOptions vo;
  vo.validation = true;
  vo.pipeline_cache = false;
  vo.chunks = 4;
  auto b = make_vulkan_backend(vo);
  Program p = plan(optimize(g, b->passes()), PlanOptions{DType::f32, b->limits()});  // as Session::add does
  b->add_program(p);
  for (const auto& name : {"x", "t", "w1", "b1", "w2"}) {
    auto bytes = one.read_raw(name);
    b->write(name, bytes.data(), bytes.size());
  }
  const uint64_t submitted = b->stats().submissions;
  b->run(0);
  EXPECT_EQ(b->stats().submissions - submitted, 4u) << "one submission per chunk";
  float got = 0;
  b->read("loss", &got, 4);
  EXPECT_EQ(got, one.scalar("loss"));
}

TEST(VulkanReplay, BarriersAreThePlansBarriers) {
  MEGANEURA_REQUIRE_VULKAN();
  Trainer t(mlp_loss, adam(), vulkan_options(3));
  Session& s = t.session();
  feed(s, 0);
  t.step();
  const Program& p = s.program(0);
  const Backend::Stats st = s.backend().stats();
  ASSERT_GT(p.barrier_count(), 0u);
  // One barrier per planned barrier (a dispatch lowered to no launch hands its barrier to the
  // next one, where it may merge), one inside each two-phase dispatch (a matmul epilogue: the
  // GEMM, then the program over its output; the cross-entropy: row losses, then their mean;
  // its backward: the count of rows, then the rows), one before each dispatch that uses the
  // program's workspace after another did (the cross-entropy's backward after its forward),
  // and the trailing one that publishes the step.
  size_t two_phase = 0, workspace_users = 0;
  for (const Dispatch& d : p.dispatches) {
    const bool cross_entropy = d.op == Op::softmax_cross_entropy || d.op == Op::softmax_cross_entropy_backward;
    two_phase += d.op == Op::matmul_epilogue || cross_entropy;
    workspace_users += cross_entropy;
  }
  ASSERT_GT(two_phase, 0u);
  const size_t expected = p.barrier_count() + two_phase + (workspace_users > 0 ? workspace_users - 1 : 0) + 1;
  EXPECT_LE(st.barriers, expected);
  if (st.dispatches == p.dispatches.size() + two_phase) {
    EXPECT_EQ(st.barriers, expected);
  }
  EXPECT_LT(st.barriers, st.dispatches);
}

}  // namespace
}  // namespace meganeura
