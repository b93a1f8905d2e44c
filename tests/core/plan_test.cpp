// The memory planner: arena size against the peak of simultaneously live bytes, in-place
// reuse, determinism, and that no two temporaries alive at once overlap.
#include <gtest/gtest.h>

#include <cstdio>

#include "meganeura/autodiff.h"
#include "meganeura/models.h"
#include "meganeura/optim.h"
#include "meganeura/program.h"
#include "plan_util.h"

namespace meganeura {
namespace {

// Every pair of arena tensors whose lifetimes overlap must occupy disjoint bytes (an
// independent check beside verify()).
void expect_no_overlap(const Program& p) {
  EXPECT_NO_THROW(verify(p));
  std::vector<int64_t> first(p.tensors.size(), -1), last(p.tensors.size(), -1);
  for (size_t d = 0; d < p.dispatches.size(); ++d) {
    auto touch = [&](uint32_t t) {
      if (first[t] < 0) first[t] = int64_t(d);
      last[t] = int64_t(d);
    };
    for (uint32_t w : p.dispatches[d].writes) touch(w);
    for (uint32_t r : p.dispatches[d].reads) touch(r);
  }
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const auto& a = p.tensors[i];
    if (a.role != Role::temp || first[i] < 0) continue;
    ASSERT_LT(a.buffer, p.arena_buffers.size());
    EXPECT_LE(a.offset + a.bytes, p.arena_buffers[a.buffer]);
    for (size_t j = i + 1; j < p.tensors.size(); ++j) {
      const auto& b = p.tensors[j];
      if (b.role != Role::temp || first[j] < 0 || a.buffer != b.buffer || a.offset == b.offset)
        continue;  // same offset: a view or in-place pair
      bool live_together = first[i] < last[j] && first[j] < last[i];
      bool bytes_overlap = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      EXPECT_FALSE(live_together && bytes_overlap) << "tensors " << i << " and " << j << " overlap";
    }
  }
}

TEST(Plan, TransformerTrainingStepNearLowerBound) {
  for (int64_t layers : {1, 2}) {
    Program p = plan(transformer_step(layers));
    const auto& m = p.memory;
    std::printf(
        "layers %lld: %zu dispatches, logical %llu, planned %llu, lower bound %llu (%.3fx), %u in place, %u views\n",
        static_cast<long long>(layers), p.dispatches.size(), static_cast<unsigned long long>(m.logical_bytes),
        static_cast<unsigned long long>(m.planned_bytes), static_cast<unsigned long long>(m.lower_bound_bytes),
        double(m.planned_bytes) / double(m.lower_bound_bytes), m.inplace_reuses, m.views);
    EXPECT_LE(double(m.planned_bytes), 1.10 * double(m.lower_bound_bytes));
    EXPECT_GE(m.planned_bytes, m.lower_bound_bytes);
    EXPECT_LT(m.planned_bytes, m.logical_bytes / 2);
    EXPECT_GT(m.inplace_reuses, 0u);
    expect_no_overlap(p);
  }
}

TEST(Plan, DeterministicAndHashable) {
  Program a = plan(transformer_step(1)), b = plan(transformer_step(1));
  EXPECT_EQ(a.to_json(), b.to_json());
  EXPECT_EQ(a.hash(), b.hash());
  Program c = plan(transformer_step(2));
  EXPECT_NE(a.hash(), c.hash());
}

TEST(Plan, StateUpdatesWriteInPlace) {
  Program p = plan(transformer_step(1));
  // AdamW updates every parameter and both moments without an end-of-step copy.
  size_t copies = 0;
  for (const auto& d : p.dispatches) copies += d.op == Op::copy;
  EXPECT_EQ(copies, 0u) << p.dump();
}

TEST(Plan, OldStateValueStillReadForcesCopy) {
  Graph g;
  Tensor s = g.state("s", {4});
  Tensor next = s + 1.0;
  g.assign(s, next);
  g.output("old_plus_new", s * next);  // reads the old value after the new one exists
  Program p = plan(g);
  ASSERT_FALSE(p.dispatches.empty());
  EXPECT_EQ(p.dispatches.back().op, Op::copy);
}

TEST(Plan, RejectsEmptyGraph) {
  Graph g;
  g.input("x", {2});
  EXPECT_THROW(plan(g), std::invalid_argument);
}

}  // namespace
}  // namespace meganeura
