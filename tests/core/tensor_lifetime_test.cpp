// Tensors against graphs that move or die under them: a moved graph takes its tensors along; a
// destroyed (or assigned-over) graph makes every use of its tensors a std::logic_error that says
// so, never a read of freed memory (this binary also runs under AddressSanitizer).
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "meganeura/autodiff.h"
#include "meganeura/graph.h"

namespace meganeura {
namespace {

// Runs f, which must throw std::logic_error whose message names the destroyed graph.
template <class F>
void expect_dead_graph(F&& f) {
  try {
    f();
    FAIL() << "no error for a tensor of a destroyed graph";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("graph was destroyed"), std::string::npos) << e.what();
  }
}

TEST(TensorLifetime, DestroyedGraphIsACheckedError) {
  Tensor x, y;
  {
    Graph g;
    x = g.input("x", {2, 3});
    y = relu(x);
    EXPECT_EQ(y.shape(), (Shape{2, 3}));
  }
  expect_dead_graph([&] { (void)x.shape(); });
  expect_dead_graph([&] { (void)relu(x); });
  expect_dead_graph([&] { (void)add(x, y); });
  expect_dead_graph([&] { (void)matmul(x, y, false, true); });
  expect_dead_graph([&] { (void)grad(sum(y), {x}); });
  // Another graph refuses it as an output, still without touching freed memory.
  Graph other;
  expect_dead_graph([&] { other.output("y", y); });
  EXPECT_EQ(other.size(), 0u);
}

TEST(TensorLifetime, DestroyedHeapGraph) {
  auto g = std::make_unique<Graph>();
  Tensor w = g->parameter("w", {4}, Init{Init::ones});
  Tensor s = sum(w * w);
  g.reset();
  expect_dead_graph([&] { (void)s.dtype(); });
  expect_dead_graph([&] { (void)(w + s); });
}

TEST(TensorLifetime, MovedGraphTakesItsTensors) {
  Graph g;
  Tensor x = g.input("x", {3});
  Tensor y = exp(x);
  Graph h = std::move(g);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_EQ(g.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is a new empty graph
  // The tensors now build in h.
  Tensor z = add(x, y);
  EXPECT_EQ(h.size(), 3u);
  EXPECT_EQ(h.node(z.id).op, Op::add);
  EXPECT_TRUE(z.graph == &h);
  h.output("z", z);
  ASSERT_EQ(h.outputs().size(), 1u);
  // The moved-from graph is usable again, and its new tensors are another graph's.
  Tensor a = g.input("a", {3});
  EXPECT_EQ(g.size(), 1u);
  EXPECT_THROW((void)add(a, x), std::invalid_argument);
  // Gradients through the moved graph.
  std::vector<Tensor> dx = grad(sum(z), {x});
  ASSERT_EQ(dx.size(), 1u);
  EXPECT_EQ(dx[0].shape(), (Shape{3}));
}

TEST(TensorLifetime, GraphsMovedInsideAGrowingVector) {
  std::vector<Graph> graphs;
  std::vector<Tensor> firsts;
  for (int i = 0; i < 40; ++i) {  // reallocates several times
    graphs.emplace_back();
    firsts.push_back(graphs.back().input("x" + std::to_string(i), {i + 1}));
  }
  for (int i = 0; i < 40; ++i) {
    Tensor y = neg(firsts[size_t(i)]);
    EXPECT_EQ(y.shape(), (Shape{i + 1}));
    EXPECT_EQ(graphs[size_t(i)].size(), 2u);
  }
}

TEST(TensorLifetime, AssignedOverGraphInvalidatesItsTensors) {
  Graph a, b;
  Tensor xa = a.input("xa", {2});
  Tensor xb = b.input("xb", {5});
  a = std::move(b);
  expect_dead_graph([&] { (void)xa.shape(); });
  EXPECT_EQ(xb.shape(), (Shape{5}));  // followed its nodes into a
  EXPECT_TRUE(xb.graph == &a);
  Graph c;
  Tensor xc = c.input("xc", {1});
  c = a;  // copy-assigned over: c's old tensors are gone, a's stay with a
  expect_dead_graph([&] { (void)xc.shape(); });
  EXPECT_TRUE(xb.graph == &a);
  EXPECT_EQ(c.size(), a.size());
}

TEST(TensorLifetime, CopyIsAGraphOfItsOwn) {
  Graph g;
  Tensor x = g.input("x", {2});
  Graph copy = g;
  Tensor y = sigmoid(x);  // builds in g, not in the copy
  EXPECT_EQ(g.size(), 2u);
  EXPECT_EQ(copy.size(), 1u);
  Tensor cx = copy.tensor(x.id);
  EXPECT_TRUE(cx.graph == &copy);
  EXPECT_THROW((void)add(cx, y), std::invalid_argument);
}

TEST(TensorLifetime, DefaultTensorIsAnError) {
  Tensor t;
  EXPECT_THROW((void)relu(t), std::invalid_argument);
  EXPECT_THROW((void)t.shape(), std::logic_error);
}

}  // namespace
}  // namespace meganeura
