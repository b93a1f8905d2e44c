// verify()'s ordering check compares each access with the last writer and the readers since,
// not with every earlier dispatch. Differential test: real planned programs with one wait
// removed, against an exhaustive pairwise check written here (every pair of dispatches whose
// byte ranges overlap with a write, reachability through the waits by graph search).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "meganeura/autodiff.h"
#include "meganeura/passes.h"
#include "meganeura/workloads.h"
#include "plan/plan_internal.h"
#include "plan_util.h"

namespace meganeura {
namespace {

Program training_program(const char* id) {
  Graph g;
  workload_with_gradients(g, id);
  return plan(optimize(g, PassOptions{}), PlanOptions{});
}

// The first (j, i), by j then i, of conflicting dispatches i < j with i not reachable from j
// through the waits; {-1, -1} when there is none.
std::pair<int64_t, int64_t> first_unordered(const Program& p) {
  const auto acc = planning::accesses(p);
  const size_t n = p.dispatches.size();
  for (size_t j = 0; j < n; ++j) {
    std::vector<char> seen(n, 0);
    std::vector<size_t> stack = {j};
    while (!stack.empty()) {
      size_t k = stack.back();
      stack.pop_back();
      for (const Hazard& h : p.dispatches[k].waits) {
        if (!seen[h.dispatch]) {
          seen[h.dispatch] = 1;
          stack.push_back(h.dispatch);
        }
      }
    }
    for (size_t i = 0; i < j; ++i) {
      if (seen[i]) continue;
      for (const auto& a : acc[j]) {
        for (const auto& b : acc[i]) {
          if ((a.write || b.write) && a.buffer == b.buffer && a.begin < b.end && b.begin < a.end)
            return {int64_t(j), int64_t(i)};
        }
      }
    }
  }
  return {-1, -1};
}

TEST(VerifyOrder, DroppedWaitsAreFoundAsByTheExhaustiveCheck) {
  std::mt19937 rng(5);
  int rejected = 0, trials = 0;
  for (const char* id : {"whisper", "resnet50", "smollm2"}) {
    const Program p = training_program(id);
    ASSERT_NO_THROW(verify(p)) << id;
    ASSERT_EQ(first_unordered(p).first, -1) << id;
    std::vector<size_t> with_waits;
    for (size_t d = 0; d < p.dispatches.size(); ++d) {
      if (!p.dispatches[d].waits.empty()) with_waits.push_back(d);
    }
    for (int t = 0; t < 12; ++t, ++trials) {
      Program q = p;
      Dispatch& d = q.dispatches[with_waits[rng() % with_waits.size()]];
      d.waits.erase(d.waits.begin() + long(rng() % d.waits.size()));
      const auto [j, i] = first_unordered(q);
      std::string error;
      try {
        verify(q);
      } catch (const std::invalid_argument& e) {
        error = e.what();
      }
      if (j < 0) {
        // The dropped wait was implied by the others.
        EXPECT_EQ(error, "") << id;
        continue;
      }
      ++rejected;
      const std::string jn = "[verify] dispatch #" + std::to_string(j) + " (",
                        in = "which dispatch #" + std::to_string(i) + " (";
      EXPECT_EQ(error.rfind(jn, 0), 0u) << id << ": expected " << jn << "... got " << error;
      EXPECT_NE(error.find(in), std::string::npos) << id << ": expected " << in << " in " << error;
      EXPECT_NE(error.find("without waiting for it"), std::string::npos) << error;
    }
  }
  // Most waits the planner keeps are needed: the test must exercise rejections.
  EXPECT_GT(rejected, trials / 2);
}

}  // namespace
}  // namespace meganeura
