// The schedule carries every size the primitive kernels use, and the CPU backend's kernels
// read them from there. Expected push words are worked out by hand from the shapes below (in
// the comments), not by calling the lowering; the kernel checks run one dispatch with a launch
// whose sizes were cut down by hand and check that only that part of the output is written.
#include "schedule/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "graph/internal.h"

namespace meganeura {
namespace {

using L = ElementwiseLayout;

// The launch of the first dispatch of `op` (and that dispatch).
struct Found {
  const Dispatch* d = nullptr;
  const KernelLaunch* l = nullptr;
};
Found find(const Program& p, const Schedule& s, Op op, size_t nth = 0) {
  for (size_t i = 0; i < p.dispatches.size(); ++i) {
    if (p.dispatches[i].op == op && nth-- == 0) return {&p.dispatches[i], &s.launches[i]};
  }
  ADD_FAILURE() << "no dispatch of " << op_name(op);
  return {};
}

std::vector<uint32_t> words(const KernelLaunch& l, size_t first, size_t count) {
  return std::vector<uint32_t>(l.push.words.begin() + long(first), l.push.words.begin() + long(first + count));
}
using W = std::vector<uint32_t>;

TEST(ScheduleLayouts, EveryFamilyCarriesItsSizes) {
  Graph g;
  Tensor x = g.input("x", {2, 3, 4, 5});
  Tensor b = g.input("b", {1, 3, 1, 5});
  Tensor x2 = g.input("x2", {2, 3, 1, 5});
  Tensor mm_a = g.input("mm_a", {2, 3, 4});
  Tensor mm_b = g.input("mm_b", {4, 6});
  Tensor img = g.input("img", {2, 3, 8, 8});
  Tensor wt = g.input("wt", {4, 3, 3, 3});
  Tensor table = g.input("table", {10, 8});
  Tensor ids = g.input("ids", {2, 3}, DType::i32);
  Tensor idx = g.input("idx", {2}, DType::i32);
  Tensor logits = g.input("logits", {6, 10});
  Tensor targets = g.input("targets", {6}, DType::i32);
  Tensor q = g.input("q", {1, 4, 6, 8});
  Tensor k = g.input("k", {1, 2, 6, 8});
  Tensor v = g.input("v", {1, 2, 6, 8});
  Tensor scores = g.input("scores", {2, 4, 4});
  g.output("exp", exp(x));
  g.output("add", x + b);
  g.output("sum_contig", sum(x, {1, 2}));
  g.output("mean_gap", mean(x, {0, 2}));
  g.output("softmax", softmax(x, 2));
  g.output("matmul", matmul(mm_a, mm_b));
  Conv2dOptions co;
  co.stride_h = co.stride_w = 2;
  co.pad_h = co.pad_w = 1;
  Tensor conv = conv2d(img, wt, co);
  g.output("conv", conv);
  g.output("pool", max_pool2d(conv, 2, 2));
  g.output("up", upsample_nearest2x(conv));
  g.output("permute", permute(x, {0, 2, 1, 3}));
  g.output("slice", slice(x, {0, 1, 0, 0}, {2, 3, 4, 5}));
  g.output("pad", pad(x, {0, 0, 1, 0}, {0, 0, 2, 0}));
  g.output("concat", concat({x, x2}, 2));
  g.output("bcast", broadcast_to(b, {2, 3, 4, 5}));
  g.output("embedding", embedding(table, ids));
  g.output("gather", gather(x, 1, idx));
  g.output("xent", softmax_cross_entropy(logits, targets));
  g.output("rope", rope(q));
  g.output("mask", causal_mask(scores));
  g.output("attention", attention_fused_packed(q, k, v, true, 0.5));
  g.output("cast", cast(x, DType::f16));
  g.output("clip", clip_coef(max(x), 1.0));
  const Program p = plan(g);
  const Schedule s = lower(p);
  ASSERT_EQ(s.launches.size(), p.dispatches.size());
  for (const KernelLaunch& l : s.launches) EXPECT_LE(l.push.used, PushConstants::kWords) << l.kernel;

  // exp and cast over 2*3*4*5 = 120 elements; clip_coef (optimizer family) of a scalar
  EXPECT_EQ(find(p, s, Op::exp).l->push.get(L::kNumel), 120u);
  EXPECT_EQ(find(p, s, Op::cast).l->push.get(L::kNumel), 120u);
  EXPECT_EQ(find(p, s, Op::clip_coef).l->push.get(L::kNumel), 1u);
  {  // x [2,3,4,5] + b [1,3,1,5]: no two neighbours agree, rank 4; b spans dims 1 and 3
    const KernelLaunch& l = *find(p, s, Op::add).l;
    EXPECT_EQ(l.kernel, "elementwise.add.broadcast");
    EXPECT_EQ(words(l, L::kNumel, 6), (W{120, 4, 2, 3, 4, 5}));
    EXPECT_EQ(l.push.get(L::kMasks), 0b1111u | 0b1010u << 8);
    EXPECT_EQ(l.push.get(L::kInputs), 2u);
  }
  {  // sum over axes 1,2: outer 2, len 12, inner 5, kind 0, 12 per output, contiguous
    const KernelLaunch& l = *find(p, s, Op::sum).l;
    EXPECT_EQ(words(l, push::kReduceOuter, 7), (W{2, 12, 5, 0, 12, 0, 0}));
    EXPECT_EQ(l.push.get(L::kNumel), 10u);
  }
  {  // mean over axes 0,2 (not contiguous): kind 1, 8 per output, rank 4, mask 0b0101
    const KernelLaunch& l = *find(p, s, Op::mean).l;
    EXPECT_EQ(words(l, push::kReduceKind, 4), (W{1, 8, 4, 0b0101}));
    EXPECT_EQ(words(l, push::kReduceExtents, 4), (W{2, 3, 4, 5}));
    EXPECT_EQ(l.push.get(L::kNumel), 15u);
  }
  // softmax along axis 2 of [2,3,4,5]: outer 6, len 4, inner 5, kind 3
  EXPECT_EQ(words(*find(p, s, Op::softmax).l, push::kReduceOuter, 4), (W{6, 4, 5, 3}));
  // [2,3,4] x [4,6]: m 3, n 6, k 4, batch 2, a batched, b shared, no transposes
  EXPECT_EQ(words(*find(p, s, Op::matmul).l, push::kMatmul, 8), (W{3, 6, 4, 2, 1, 0, 0, 0}));
  {  // conv [2,3,8,8] * [4,3,3,3], stride 2, pad 1: (8 + 2 - 3) / 2 + 1 = 4
    const KernelLaunch& l = *find(p, s, Op::conv2d).l;
    EXPECT_EQ(words(l, push::kConv, 16), (W{2, 3, 8, 8, 4, 3, 3, 4, 4, 1, 2, 2, 1, 1, 1, 1}));
  }
  // max pool 2/2 of [2,4,4,4] -> [2,4,2,2]
  EXPECT_EQ(words(*find(p, s, Op::max_pool2d).l, push::kPool, 12), (W{2, 4, 4, 4, 2, 2, 2, 2, 0, 0, 2, 2}));
  EXPECT_EQ(words(*find(p, s, Op::upsample_nearest2x).l, push::kPool, 12), (W{2, 4, 4, 4, 0, 0, 0, 0, 0, 0, 8, 8}));
  {  // permute (0,2,1,3): [2,3,4,5] -> [2,4,3,5]
    const KernelLaunch& l = *find(p, s, Op::permute).l;
    EXPECT_EQ(l.push.get(push::kMoveRank), 4u);
    EXPECT_EQ(words(l, push::kMoveIn, 4), (W{2, 3, 4, 5}));
    EXPECT_EQ(words(l, push::kMoveOut, 4), (W{2, 4, 3, 5}));
    EXPECT_EQ(words(l, push::kMoveParam, 4), (W{0, 2, 1, 3}));
  }
  {  // slice [0:2, 1:3, :, :] -> [2,2,4,5]; pad dim 2 by (1, 2) -> [2,3,7,5]
    const KernelLaunch& sl = *find(p, s, Op::slice).l;
    EXPECT_EQ(words(sl, push::kMoveOut, 4), (W{2, 2, 4, 5}));
    EXPECT_EQ(words(sl, push::kMoveParam, 4), (W{0, 1, 0, 0}));
    const KernelLaunch& pd = *find(p, s, Op::pad).l;
    EXPECT_EQ(words(pd, push::kMoveOut, 4), (W{2, 3, 7, 5}));
    EXPECT_EQ(words(pd, push::kMoveParam, 4), (W{0, 0, 1, 0}));
  }
  // concat along 2 of [2,3,4,5] and [2,3,1,5]: outer 6, inner 5, two inputs of 4 and 1
  EXPECT_EQ(words(*find(p, s, Op::concat).l, push::kConcatOuter, 5), (W{6, 5, 2, 4, 1}));
  {  // broadcast_to [1,3,1,5] -> [2,3,4,5]: one input spanning dims 1 and 3
    const KernelLaunch& l = *find(p, s, Op::broadcast_to).l;
    EXPECT_EQ(words(l, L::kNumel, 6), (W{120, 4, 2, 3, 4, 5}));
    EXPECT_EQ(l.push.get(L::kMasks), 0b1010u);
  }
  // embedding: table [10,8], 6 ids
  EXPECT_EQ(words(*find(p, s, Op::embedding).l, push::kIndexRows, 3), (W{10, 8, 6}));
  // gather along 1 of [2,3,4,5] with 2 indices: 2 rows before, 20 after, 2 indices, axis 3
  EXPECT_EQ(words(*find(p, s, Op::gather).l, push::kIndexRows, 4), (W{2, 20, 2, 3}));
  EXPECT_EQ(words(*find(p, s, Op::softmax_cross_entropy).l, push::kIndexRows, 2), (W{6, 10}));
  // rope of [1,4,6,8]: 24 rows of 8, 6 positions; mask of [2,4,4]: 8 rows of 4 keys, 4 queries
  EXPECT_EQ(words(*find(p, s, Op::rope).l, push::kSeqRows, 3), (W{24, 8, 6}));
  EXPECT_EQ(words(*find(p, s, Op::causal_mask).l, push::kSeqRows, 3), (W{8, 4, 4}));
  // attention q [1,4,6,8], k/v [1,2,6,8]: b, hq, hkv, sq, sk, d, dv
  EXPECT_EQ(words(*find(p, s, Op::attention_fused).l, push::kAttention, 7), (W{1, 4, 2, 6, 6, 8, 8}));
}

TEST(ScheduleLayouts, MovementBeyondTheKernelsRankIsAnError) {
  Graph g;
  Tensor x = g.input("x", {1, 2, 1, 2, 1, 2, 1, 2, 1});  // rank 9 > push::kMaxRank
  g.output("y", permute(x, {8, 7, 6, 5, 4, 3, 2, 1, 0}));
  try {
    lower(plan(g));
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[schedule] permute"), std::string::npos) << what;
    EXPECT_NE(what.find("(1,2,1,2,1,2,1,2,1)"), std::string::npos) << what;
  }
}

// Runs the first dispatch of `op` in `g` on the CPU kernels with the launch `edit` made from
// the lowered one; inputs hold `in`, outputs start as the sentinel -7.
constexpr float kSentinel = -7;
std::vector<float> run_edited(const Graph& g, Op op, const std::vector<std::vector<float>>& in,
                              const std::function<void(KernelLaunch&)>& edit) {
  const Program p = plan(g);
  const Schedule s = lower(p);
  const Found f = find(p, s, op);
  if (!f.d) return {};
  KernelLaunch l = *f.l;
  edit(l);
  std::vector<std::vector<float>> bufs = in;
  std::vector<cpu::Arg> args;
  for (auto& b : bufs) args.push_back(cpu::Arg{b.data(), DType::f32});
  std::vector<float> out(size_t(p.tensors.at(f.d->write()).type.numel()), kSentinel);
  std::vector<std::byte> ws(l.workspace_bytes + 1);
  cpu::set_workspace(ws.data(), l.workspace_bytes);
  cpu::execute<float>(*f.d, l, args, {cpu::Arg{out.data(), DType::f32}});
  cpu::set_workspace(nullptr, 0);
  return out;
}

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.25f * float(i) - 3;
  return v;
}

// Inputs are multiples of 1/4 in [-3, 5): their sums and small products are exact in f32, so
// those comparisons are exact; exp compares against std::exp on the same float (4 ulp), the
// GEMM within 1e-5 (the library's own summation order, though these sums are exact too).
TEST(ScheduleLayouts, CpuKernelsTakeTheirSizesFromTheLaunch) {
  {  // exp over 5 of 32 elements
    Graph g;
    g.output("y", exp(g.input("x", {4, 8})));
    const auto x = ramp(32);
    const auto y = run_edited(g, Op::exp, {x}, [](KernelLaunch& l) { l.push.set(L::kNumel, 5); });
    for (size_t i = 0; i < 32; ++i) {
      if (i < 5)
        EXPECT_FLOAT_EQ(y[i], std::exp(x[i])) << i;
      else
        EXPECT_EQ(y[i], kSentinel) << i;
    }
  }
  {  // add of two [4,8]: 10 elements
    Graph g;
    g.output("y", g.input("a", {4, 8}) + g.input("b", {4, 8}));
    const auto a = ramp(32), b = ramp(32);
    const auto y = run_edited(g, Op::add, {a, b}, [](KernelLaunch& l) {
      l.push.set(L::kNumel, 10);
      l.push.set(L::kExtents, 10);
    });
    for (size_t i = 0; i < 32; ++i) EXPECT_EQ(y[i], i < 10 ? a[i] + b[i] : kSentinel) << i;
  }
  {  // broadcast add [4,8] + [8]: 2 rows of 8
    Graph g;
    g.output("y", g.input("a", {4, 8}) + g.input("b", {8}));
    const auto a = ramp(32), b = ramp(8);
    const auto y = run_edited(g, Op::add, {a, b}, [](KernelLaunch& l) {
      l.push.set(L::kNumel, 16);
      l.push.set(L::kExtents, 2);
    });
    for (size_t i = 0; i < 32; ++i) EXPECT_EQ(y[i], i < 16 ? a[i] + b[i % 8] : kSentinel) << i;
  }
  {  // row sums of [4,8] launched as [2,3]: two outputs, each over 3 consecutive inputs
    Graph g;
    g.output("y", sum(g.input("x", {4, 8}), {1}));
    const auto x = ramp(32);
    const auto y = run_edited(g, Op::sum, {x}, [](KernelLaunch& l) {
      l.push.set(push::kReduceOuter, 2);
      l.push.set(push::kReduceLen, 3);
    });
    for (size_t r = 0; r < 4; ++r) {
      EXPECT_EQ(y[r], r < 2 ? x[r * 3] + x[r * 3 + 1] + x[r * 3 + 2] : kSentinel) << r;
    }
  }
  {  // [4,3] x [3,5]: the first 2 rows of the product
    Graph g;
    g.output("y", matmul(g.input("a", {4, 3}), g.input("b", {3, 5})));
    const auto a = ramp(12), b = ramp(15);
    const auto y = run_edited(g, Op::matmul, {a, b}, [](KernelLaunch& l) { l.push.set(push::kMatmul, 2); });
    for (size_t i = 0; i < 4; ++i) {
      for (size_t j = 0; j < 5; ++j) {
        float want = 0;
        for (size_t t = 0; t < 3; ++t) want += a[i * 3 + t] * b[t * 5 + j];
        if (i < 2)
          EXPECT_NEAR(y[i * 5 + j], want, 1e-5) << i << "," << j;  // sgemm's summation order
        else
          EXPECT_EQ(y[i * 5 + j], kSentinel) << i << "," << j;
      }
    }
  }
  {  // max pool 2/2 of [1,2,4,4] launched with one channel: only the first plane's 2x2 outputs
    Graph g;
    g.output("y", max_pool2d(g.input("x", {1, 2, 4, 4}), 2, 2));
    const auto x = ramp(32);
    const auto y = run_edited(g, Op::max_pool2d, {x}, [](KernelLaunch& l) { l.push.set(push::kPool + 1, 1); });
    // the ramp increases: each window's maximum is its bottom-right element
    EXPECT_EQ(y, (std::vector<float>{x[5], x[7], x[13], x[15], kSentinel, kSentinel, kSentinel, kSentinel}));
  }
  {  // embedding of 4 ids launched with 2: two rows copied
    Graph g;
    g.output("y", embedding(g.input("table", {5, 3}), g.input("ids", {4}, DType::i32)));
    const auto table = ramp(15);
    std::vector<int32_t> ids = {4, 1, 0, 2};
    const Program p = plan(g);
    const Schedule s = lower(p);
    const Found f = find(p, s, Op::embedding);
    ASSERT_NE(f.d, nullptr);
    KernelLaunch l = *f.l;
    l.push.set(push::kIndexCount, 2);
    std::vector<float> y(12, kSentinel), t = table;
    cpu::execute<float>(*f.d, l, {cpu::Arg{t.data(), DType::f32}, cpu::Arg{ids.data(), DType::i32}},
                        {cpu::Arg{y.data(), DType::f32}});
    for (size_t i = 0; i < 12; ++i) EXPECT_EQ(y[i], i < 6 ? table[size_t(ids[i / 3]) * 3 + i % 3] : kSentinel) << i;
  }
  {  // permute [2,3] -> [3,2] read as a [2,2] output of a [2,3] input: the first two columns
    Graph g;
    g.output("y", permute(g.input("x", {2, 3}), {1, 0}));
    const auto x = ramp(6);
    const auto y = run_edited(g, Op::permute, {x}, [](KernelLaunch& l) { l.push.set(push::kMoveOut, 2); });
    EXPECT_EQ(y, (std::vector<float>{x[0], x[3], x[1], x[4], kSentinel, kSentinel}));
  }
}

}  // namespace
}  // namespace meganeura
