// A training step whose planned memory (arena and parameters) exceeds 2 GB runs on the Vulkan
// device: chargpt widened to 2048 dimensions and 16 blocks (286M parameters) on a short
// sequence with plain SGD, so the step stays cheap on a CPU-emulated device (the cost there is
// the per-element update of every parameter). The planner keeps every tensor within the
// device's storage-buffer range (128 MiB on lavapipe) and splits the arena into buffers within
// it; the step's loss and updated parameters match the CPU backend's.
//
// Tolerances: the loss is an f32 reduction over 8 rows after 16 blocks of f32 GEMMs with
// 2048-long dot products, summed in different orders on the two backends: 1e-4 relative is a
// few hundred ulps. SGD moves a weight by lr * g; the backends' gradients differ by rounding
// (measured: up to 1.05e-4 relative, in the token embedding, whose gradient passes back
// through all 16 blocks, where the row kernels and the GEMMs sum in different orders), so
// updated weights agree within 2e-4 * lr * |g|, bounded here by 2e-6 absolute (|g| < 0.1 for
// this initialisation).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

#include "meganeura/models.h"
#include "meganeura/train.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

constexpr int64_t kSeq = 8;

Tensor wide_chargpt_loss(Graph& g) {
  models::CharGptConfig c;
  c.vocab = 65;
  c.dim = 2048;
  c.heads = c.kv_heads = 16;
  c.layers = 16;
  c.seq = kSeq;
  Tensor ids = g.input("ids", {1, kSeq}, DType::i32);
  Tensor targets = g.input("targets", {kSeq}, DType::i32);
  return cross_entropy(reshape(models::chargpt(g, ids, c), {kSeq, c.vocab}), targets);
}

void feed(Session& s) {
  std::vector<int32_t> ids(kSeq), targets(kSeq);
  for (int64_t i = 0; i < kSeq; ++i) {
    ids[size_t(i)] = int32_t((i * 7 + 3) % 65);
    targets[size_t(i)] = int32_t((i * 11 + 5) % 65);
  }
  s.set("ids", std::span<const int32_t>(ids));
  s.set("targets", std::span<const int32_t>(targets));
}

OptimizerConfig sgd() {
  OptimizerConfig o;
  o.kind = OptimizerConfig::Kind::sgd;
  o.lr = 0.1;
  o.momentum = 0;
  return o;
}

TEST(VulkanLarge, TrainingStepAboveTwoGigabytesMatchesTheCpu) {
  MEGANEURA_REQUIRE_VULKAN();
  // Validation checks every one of the step's thousands of descriptor writes; the op tests
  // cover the same kernels with it on.
  SessionOptions vo = testing_vulkan::vulkan_options(3);
  vo.vulkan_validation = false;
  Trainer gpu(wide_chargpt_loss, sgd(), vo);
  const Program& p = gpu.session().program(0);
  const DeviceLimits lim = gpu.session().backend().limits();
  const uint64_t planned = p.arena_bytes + p.memory.external_bytes;
  std::printf("planned %.2f GB (arena %.2f GB in %zu buffers, external %.2f GB), binding limit %.0f MiB\n",
              double(planned) / 1e9, double(p.arena_bytes) / 1e9, p.arena_buffers.size(),
              double(p.memory.external_bytes) / 1e9, double(lim.max_binding_bytes) / 1048576.0);
  ASSERT_GT(planned, uint64_t(2) << 30);
  for (uint64_t b : p.arena_buffers) EXPECT_LE(b, lim.buffer_limit());
  for (const ProgramTensor& t : p.tensors) EXPECT_LE(t.bytes, lim.max_binding_bytes);
  if (lim.max_binding_bytes < p.arena_bytes) {
    EXPECT_GT(p.arena_buffers.size(), 1u) << "the arena was not split";
  }

  Trainer cpu(wide_chargpt_loss, sgd(), SessionOptions{.device = Device::cpu, .seed = 3});
  const char* names[] = {"tok_embedding", "layers.0.wq", "layers.15.w_down", "layers.15.ffn_norm"};
  std::vector<std::vector<double>> before;
  for (const char* name : names) before.push_back(cpu.session().get_f64(name));
  feed(gpu.session());
  feed(cpu.session());
  const float want = cpu.step(), got = gpu.step();
  std::printf("loss: cpu %.6f, vulkan %.6f\n", double(want), double(got));
  ASSERT_TRUE(std::isfinite(got));
  EXPECT_NEAR(got, want, 1e-4 * std::abs(want));
  for (size_t n = 0; n < std::size(names); ++n) {
    const std::vector<double> a = gpu.session().get_f64(names[n]), b = cpu.session().get_f64(names[n]);
    ASSERT_EQ(a.size(), b.size()) << names[n];
    double moved = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_NEAR(a[i], b[i], 2e-6) << names[n] << " at " << i;
      moved = std::max(moved, std::abs(b[i] - before[n][i]));
    }
    EXPECT_GT(moved, 1e-6) << names[n] << " was not updated";
  }
}

}  // namespace
}  // namespace meganeura
