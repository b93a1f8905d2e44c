// Kernels take their scratch from the workspace the schedule planned: while a program with a
// 3x3 convolution (im2col), its two backward convolutions and a fused reduction runs, no heap
// allocation comes near the size of that scratch. (The largest allocation left is the thread
// pool's small task object.) A separate binary: it replaces the global operator new.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "io/allocation_counter.h"
#include "meganeura/autodiff.h"
#include "meganeura/passes.h"
#include "meganeura/session.h"
#include "schedule/schedule.h"

namespace meganeura {
namespace {

TEST(Workspace, KernelsDoNotAllocateTheirScratch) {
  Graph g;
  Tensor x = g.parameter("x", {2, 8, 32, 32}, Init{Init::normal, 1});
  Tensor w = g.parameter("w", {8, 8, 3, 3}, Init{Init::normal, 0.1});
  Conv2dOptions co;
  co.pad_h = co.pad_w = 1;
  Tensor y = conv2d(x, w, co);
  Tensor loss = mean(y * y);
  g.output("loss", loss);
  auto grads = grad(loss, {x, w});
  g.output("dx", grads[0]);
  g.output("dw", grads[1]);
  for (bool f64 : {false, true}) {
    PlanOptions po;
    po.float_dtype = f64 ? DType::f64 : DType::f32;
    Program p = plan(optimize(g), po);
    const Schedule s = lower(p);
    // one image's columns: 8 channels * 3 * 3 rows by 32 * 32 outputs
    const size_t elem = f64 ? 8 : 4;
    ASSERT_EQ(s.workspace_bytes, 72u * 1024u * elem);
    bool fused_reduce = false;
    for (const Dispatch& d : p.dispatches) fused_reduce |= d.op == Op::fused_reduce;
    EXPECT_TRUE(fused_reduce);
    Session session(SessionOptions{.device = Device::cpu, .f64_oracle = f64, .seed = 3, .threads = 2});
    session.add(p);
    session.run();  // first run: anything lazily created is created now
    io::testing::reset_largest_allocation();
    session.run();
    EXPECT_LT(io::testing::largest_allocation(), 4096u) << (f64 ? "f64" : "f32");
    EXPECT_TRUE(std::isfinite(session.scalar("loss")));
  }
}

}  // namespace
}  // namespace meganeura
