// Autodiff errors: differentiating through an op that only appears inside gradients is an
// error naming the op, never a silent zero.
#include "meganeura/autodiff.h"

#include <gtest/gtest.h>

namespace meganeura {
namespace {

TEST(Autodiff, BackwardOnlyOpIsAnErrorNamingIt) {
  Graph g;
  Tensor x = g.parameter("x", {3}, Init{Init::constant, 0.5});
  Tensor loss = sum(gelu_grad(x, true));
  try {
    grad(loss, {x});
    FAIL() << "differentiating gelu_tanh_grad gave a result";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gelu_tanh_grad"), std::string::npos) << e.what();
  }
}

TEST(Autodiff, BackwardOnlyOpOffThePathIsFine) {
  // The backward-only op does not depend on x: its gradient is not needed.
  Graph g;
  Tensor x = g.parameter("x", {3}, Init{Init::constant, 0.5});
  Tensor c = g.input("c", {3});
  Tensor loss = sum(x * gelu_grad(c, false));
  auto gx = grad(loss, {x});
  ASSERT_EQ(gx.size(), 1u);
  EXPECT_EQ(gx[0].shape(), (Shape{3}));
}

}  // namespace
}  // namespace meganeura
