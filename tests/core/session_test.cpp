// Session semantics: state assignments act as one simultaneous update, and a program refused
// by the session's checks leaves the session and its backend in step.
#include "meganeura/session.h"

#include <gtest/gtest.h>

#include <vector>

namespace meganeura {
namespace {

// Runs one step of a graph that doubles `p` and keeps its previous value in `prev`, with the
// two assignments declared in the given order. Exact values: integers in f32.
std::pair<float, float> double_and_keep(bool prev_first) {
  Graph g;
  Tensor p = g.state("p", {}, Init{Init::constant, 3});
  Tensor prev = g.state("prev", {}, Init{Init::zeros});
  if (prev_first) g.assign(prev, p);
  g.assign(p, p * 2.0);
  if (!prev_first) g.assign(prev, p);
  Session s;
  s.add(g);
  s.run();
  return {s.scalar("p"), s.scalar("prev")};
}

TEST(Assign, ReadsValuesFromBeforeTheStepInEitherOrder) {
  for (bool prev_first : {true, false}) {
    auto [p, prev] = double_and_keep(prev_first);
    EXPECT_EQ(p, 6.0f) << "prev assigned first: " << prev_first;
    EXPECT_EQ(prev, 3.0f) << "prev assigned first: " << prev_first;
  }
}

TEST(Assign, SwapAndRotateStates) {
  Graph g;
  Tensor a = g.state("a", {2}, Init{Init::constant, 1});
  Tensor b = g.state("b", {2}, Init{Init::constant, 2});
  Tensor c = g.state("c", {2}, Init{Init::constant, 3});
  g.assign(a, b);        // a <- b (old)
  g.assign(b, c + 0.0);  // b <- c (old), computed
  g.assign(c, a);        // c <- a (old)
  Session s;
  s.add(g);
  for (int step = 0; step < 2; ++step) s.run();
  // Two rotations of (1, 2, 3) by one place: (3, 1, 2).
  EXPECT_EQ(s.get("a"), (std::vector<float>{3, 3}));
  EXPECT_EQ(s.get("b"), (std::vector<float>{1, 1}));
  EXPECT_EQ(s.get("c"), (std::vector<float>{2, 2}));
}

TEST(Session, RefusedProgramLeavesBackendInStep) {
  Session s;
  Graph g1;
  g1.output("y", g1.input("x", {2, 3}) * 2.0);
  ASSERT_EQ(s.add(g1), 0u);
  Graph g2;  // same bytes, other shape
  g2.output("y2", g2.input("x", {3, 2}) * 2.0);
  try {
    s.add(g2);
    FAIL() << "a buffer with two shapes was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.program_count(), 1u);
  Graph g3;
  g3.output("z", g3.input("x", {2, 3}) + 1.0);
  size_t i = s.add(g3);
  EXPECT_EQ(i, 1u);
  EXPECT_EQ(s.program_count(), 2u);
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  s.set("x", std::span<const float>(x));
  s.run(i);
  EXPECT_EQ(s.get("z"), (std::vector<float>{2, 3, 4, 5, 6, 7}));
}

}  // namespace
}  // namespace meganeura
