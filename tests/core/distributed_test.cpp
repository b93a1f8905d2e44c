// Data-parallel training in one process: where the schedule places the gradient buckets, the CPU
// backend stopping at marks between dispatches, and the data-parallel Trainer on the
// single-process communicator against the plain Trainer.
#include "meganeura/distributed.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "distributed/buckets.h"
#include "meganeura/models.h"
#include "meganeura/train.h"

namespace meganeura {
namespace {

using distributed::Bucket;
using distributed::BucketLayout;
using distributed::completion_dispatch;
using distributed::make_buckets;
using distributed::plan_layout;

models::CharGptConfig small_gpt() {
  models::CharGptConfig c;
  c.vocab = 16;
  c.dim = 32;
  c.heads = c.kv_heads = 2;
  c.layers = 2;
  c.ffn = 64;
  c.seq = 16;
  return c;
}

constexpr int64_t kGptBatch = 2;

Tensor gpt_loss(Graph& g) {
  const models::CharGptConfig c = small_gpt();
  Tensor ids = g.input("ids", {kGptBatch, c.seq}, DType::i32);
  Tensor targets = g.input("targets", {kGptBatch * c.seq}, DType::i32);
  return cross_entropy(reshape(models::chargpt(g, ids, c), {kGptBatch * c.seq, c.vocab}), targets);
}

void feed_gpt(Session& s, int step) {
  std::vector<int32_t> ids(size_t(kGptBatch * small_gpt().seq)), targets(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int32_t((i * 7 + size_t(step) * 3) % 16);
    targets[i] = int32_t((i * 5 + size_t(step)) % 16);
  }
  s.set("ids", std::span<const int32_t>(ids));
  s.set("targets", std::span<const int32_t>(targets));
}

// The gradient outputs of a data-parallel Trainer's grad program ("grad.<parameter>").
std::vector<std::string> gradient_outputs(const Program& p) {
  std::vector<std::string> names;
  for (const ExternalBuffer& e : p.externals) {
    if (e.role == Role::output && e.name.rfind("grad.", 0) == 0) names.push_back(e.name);
  }
  return names;
}

uint64_t bytes_of(const Program& p, const std::string& name) {
  const ExternalBuffer* e = p.external(name);
  return uint64_t(e->type.numel()) * dtype_size(e->stored);
}

struct GradProgram {
  std::unique_ptr<Communicator> comm = make_single_communicator();
  Trainer trainer{gpt_loss, OptimizerConfig{}, SessionOptions{}, DataParallelOptions{.comm = comm.get()}};
  const Program& program() const { return const_cast<Trainer&>(trainer).session().program(0); }
};

// Buckets follow the order in which the grad program completes the gradients, close once they
// reach the cap, and start right after the dispatch that writes their last gradient.
TEST(DataParallelBuckets, EveryGradientOnceInCompletionOrderClosingAtTheCap) {
  GradProgram gp;
  const Program& p = gp.program();
  const std::vector<std::string> grads = gradient_outputs(p);
  ASSERT_EQ(grads.size(), gp.trainer.graph().parameters().size());
  const uint64_t cap = 8192;
  const BucketLayout layout = plan_layout(p, grads, cap);
  const std::vector<Bucket> buckets = make_buckets(p, grads, layout);
  ASSERT_GT(buckets.size(), 2u);
  std::multiset<size_t> seen;
  uint32_t previous = 0;
  for (size_t k = 0; k < buckets.size(); ++k) {
    const Bucket& b = buckets[k];
    uint64_t bytes = 0;
    uint32_t last_write = 0;
    for (size_t i = 0; i < b.gradients.size(); ++i) {
      const std::string& name = grads[b.gradients[i]];
      seen.insert(b.gradients[i]);
      EXPECT_EQ(b.offsets[i], bytes) << name;
      bytes += bytes_of(p, name);
      const uint32_t done = completion_dispatch(p, name);
      EXPECT_GE(done, previous) << name << ": completed before an earlier bucket's gradient";
      bool writes = false;
      for (uint32_t w : p.dispatches.at(done).writes) writes = writes || p.tensors[w].binding == name;
      EXPECT_TRUE(writes) << "dispatch " << done << " does not write " << name;
      for (size_t d = done + 1; d < p.dispatches.size(); ++d) {
        for (uint32_t w : p.dispatches[d].writes) EXPECT_NE(p.tensors[w].binding, name) << "dispatch " << d;
      }
      last_write = std::max(last_write, done);
    }
    EXPECT_EQ(b.bytes, bytes);
    EXPECT_EQ(b.ready_after, last_write) << "bucket " << k;
    if (k + 1 < buckets.size()) {
      EXPECT_GE(b.bytes, cap) << "bucket " << k << " closed early";
      EXPECT_LT(b.bytes - bytes_of(p, grads[b.gradients.back()]), cap) << "bucket " << k << " closed late";
    }
    previous = last_write;
  }
  EXPECT_EQ(seen.size(), grads.size());
  EXPECT_EQ(std::set<size_t>(seen.begin(), seen.end()).size(), grads.size());
  // The first bucket is ready well before the backward pass ends: its reduction can overlap.
  EXPECT_LT(buckets.front().ready_after, buckets.back().ready_after);
  std::printf("%zu buckets of >= %llu bytes; ready after dispatches", buckets.size(),
              static_cast<unsigned long long>(cap));
  for (const Bucket& b : buckets) std::printf(" %u", b.ready_after);
  std::printf(" of %zu\n", p.dispatches.size());

  EXPECT_EQ(make_buckets(p, grads, plan_layout(p, grads, uint64_t(1) << 40)).size(), 1u);
}

// Another rank's layout (here, the reverse order) is kept as given; the ready points follow
// this program and never decrease, since every rank starts the collectives in layout order.
TEST(DataParallelBuckets, AnotherRanksLayoutKeepsItsOrderWithMonotoneReadyPoints) {
  GradProgram gp;
  const Program& p = gp.program();
  const std::vector<std::string> grads = gradient_outputs(p);
  BucketLayout layout = plan_layout(p, grads, 4096);
  std::reverse(layout.order.begin(), layout.order.end());
  const std::vector<Bucket> buckets = make_buckets(p, grads, layout);
  size_t position = 0;
  for (size_t k = 0; k < buckets.size(); ++k) {
    for (size_t g : buckets[k].gradients) {
      EXPECT_EQ(int32_t(g), layout.order[position++]);
      EXPECT_GE(buckets[k].ready_after, completion_dispatch(p, grads[g])) << grads[g];
    }
    if (k) {
      EXPECT_GE(buckets[k].ready_after, buckets[k - 1].ready_after);
    }
  }
  BucketLayout broken = layout;
  broken.order[1] = broken.order[0];
  EXPECT_THROW(make_buckets(p, grads, broken), std::invalid_argument);
  broken = layout;
  broken.order.pop_back();
  EXPECT_THROW(make_buckets(p, grads, broken), std::invalid_argument);
}

// The CPU backend stops at each mark: when the callback for an early output runs, that output
// holds its final value and a later output has not been computed yet.
TEST(RunMarked, CpuCallsEachMarkBetweenDispatches) {
  Graph g;
  Tensor x = g.input("x", {64});
  Tensor a = exp(x);
  g.output("a", a);
  Tensor b = a;
  for (int i = 0; i < 4; ++i) b = matmul(reshape(b, {8, 8}), reshape(b, {8, 8}));  // not fusable into one
  g.output("b", reshape(b, {64}));
  Session s;
  s.add(g);
  std::vector<float> xs(64);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.01f * float(i);
  s.set("x", std::span<const float>(xs));
  const Program& p = s.program(0);
  const std::vector<uint32_t> marks = {completion_dispatch(p, "a"), completion_dispatch(p, "b")};
  ASSERT_LT(marks[0], marks[1]);
  std::vector<std::vector<float>> at_mark_a, at_mark_b;
  std::vector<size_t> calls;
  s.run(0, marks, [&](size_t k) {
    calls.push_back(k);
    auto& seen = k == 0 ? at_mark_a : at_mark_b;
    seen.push_back(s.get("a"));
    seen.push_back(s.get("b"));
  });
  ASSERT_EQ(calls, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(at_mark_a[0], s.get("a"));
  EXPECT_EQ(at_mark_a[1], std::vector<float>(64, 0.0f)) << "b was computed before the mark of a";
  EXPECT_EQ(at_mark_b[1], s.get("b"));
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_FLOAT_EQ(at_mark_a[0][i], std::exp(xs[i]));
}

OptimizerConfig adamw_clipped(int accumulation) {
  OptimizerConfig o;
  o.kind = OptimizerConfig::Kind::adamw;
  o.lr = 1e-2;
  o.weight_decay = 0.01;
  o.clip_norm = 0.5;
  o.accumulation = accumulation;
  return o;
}

// One rank of a data-parallel Trainer runs the step as two programs (gradients as outputs,
// then the optimizer): the parameters match the one-program step to f32 rounding (the rewrite
// passes fuse the split step differently). With accumulation both run the same two programs,
// and the reduction (a sum over one rank, divided by one) leaves them bit-identical; it
// reduces once per update, not per micro-step.
TEST(DataParallelTrainer, OneRankMatchesThePlainTrainer) {
  for (int k : {1, 2}) {
    SCOPED_TRACE("accumulation " + std::to_string(k));
    auto comm = make_single_communicator();
    Trainer plain(gpt_loss, adamw_clipped(k), SessionOptions{.device = Device::cpu, .seed = 3});
    Trainer parallel(gpt_loss, adamw_clipped(k), SessionOptions{.device = Device::cpu, .seed = 3},
                     DataParallelOptions{.comm = comm.get(), .bucket_mb = 0.01});
    for (int step = 0; step < 6; ++step) {
      feed_gpt(plain.session(), step);
      feed_gpt(parallel.session(), step);
      const float a = plain.step(), b = parallel.step();
      EXPECT_NEAR(a, b, 1e-5 * std::abs(a)) << "step " << step;
    }
    EXPECT_EQ(plain.updates(), 6 / k);
    EXPECT_EQ(parallel.updates(), 6 / k);
    double worst = 0;
    for (NodeId id : plain.graph().parameters()) {
      const std::string& name = plain.graph().node(id).name;
      const auto x = plain.session().get(name), y = parallel.session().get(name);
      if (k > 1) {
        EXPECT_EQ(x, y) << name;
      }
      for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, double(std::abs(x[i] - y[i])));
    }
    // 6 steps of at most lr = 1e-2 each; the split step's rounding moves them by a few ulps.
    EXPECT_LT(worst, 1e-6);
    const CommProfile prof = parallel.comm_profile();
    EXPECT_EQ(prof.updates, 6 / k);
    EXPECT_GT(prof.buckets, 1u);
    EXPECT_EQ(prof.bucket_ready.size(), prof.buckets);
    const double grad_bytes = std::accumulate(prof.bucket_bytes.begin(), prof.bucket_bytes.end(), 0.0);
    EXPECT_DOUBLE_EQ(prof.bytes, grad_bytes * double(6 / k));
    EXPECT_EQ(prof.update_s.size(), size_t(6 / k));
  }
}

TEST(DataParallelTrainer, RefusesABucketSizeThatIsNotAPositiveNumber) {
  auto comm = make_single_communicator();
  for (double mb : {0.0, -1.0, std::nan(""), double(INFINITY)}) {
    try {
      Trainer t(gpt_loss, OptimizerConfig{}, SessionOptions{},
                DataParallelOptions{.comm = comm.get(), .bucket_mb = mb});
      ADD_FAILURE() << "accepted a bucket size of " << mb << " MB";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("bucket size"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace meganeura
