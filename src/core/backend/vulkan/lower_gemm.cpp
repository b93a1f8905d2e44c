#include "backend/vulkan/lower_gemm.h"

#include <algorithm>
#include <bit>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>

#include "graph/op_table.h"
#include "meganeura/schedule.h"

namespace meganeura::vk {
namespace {

[[noreturn]] void refuse(Op op, const std::string& why) {
  throw std::invalid_argument("[vulkan:" + std::string(op_name(op)) + "] " + why);
}

uint32_t u32(Op op, uint64_t v, const char* what) {
  if (v > UINT32_MAX) refuse(op, std::string(what) + " of " + std::to_string(v) + " exceeds 32 bits");
  return uint32_t(v);
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Push words of the GEMM kernels: gemm_params.glsl (shared), matmul.comp, epilogue.glsl.
constexpr size_t kM = 0, kN = 1, kK = 2, kLda = 3, kLdb = 4, kLdc = 5, kBatchA = 6, kBatchB = 7, kBatchC = 8,
                 kKChunk = 9, kSplits = 10, kBatches = 11, kEpilogueLayout = 12;
// conv.comp
constexpr size_t kWorkspaceBase = 30;
// conv.comp
constexpr size_t kC = 3, kKH = 12, kPY = 16, kPX = 17, kDY = 18, kDX = 19, kMKK = 22, kMKW = 23, kMPix = 24, kMRow = 25,
                 kPix = 26, kRow = 27, kShifts = 28, kTaps = 29, kPhase = 31;
enum : uint32_t { kModeGemm = 0, kModeReduce = 1 };
enum : uint32_t { kForward = 0, kInputGrad = 1, kWeightGrad = 2 };
// A split keeps at least this much of K (its partial products cost a write and a read), and
// the reduction sums at most this many splits.
constexpr uint64_t kMinSplitK = 128, kMaxSplits = 64;

// One GEMM as the kernels see it: C[batch] (m x n) = op(A)[batch] (m x k) op(B)[batch] (k x n).
struct Problem {
  Kernel kernel = Kernel::matmul;  // matmul, matmul_fused or conv
  uint32_t operation = 0;          // conv.comp's pass
  uint64_t m = 0, n = 0, k = 0, batches = 1;
  bool a_along_k = true, b_along_n = true, vec_a = false, vec_b = false, vec_c = false;
  uint32_t words[32] = {};  // the kernel's own push words; the shared ones are set on emission
  uint64_t epilogue = 0;    // instructions of the fused program (0: none)
};

struct Split {
  GemmTiles t;
  uint32_t workgroup = 0;
  uint64_t step = 4, chunk = 4, splits = 1;  // K per loop iteration, per split
  uint64_t epilogue_iterations = 0;          // the fused program's loop, per invocation
};

uint64_t workspace_bytes(const Problem& pr, uint64_t splits) { return splits * pr.batches * pr.m * pr.n * 4; }

// One run of the fused program over 4 results (epilogue.glsl): per result its instructions,
// each with up to 7 iterations computing a broadcast input's offset.
uint64_t epilogue_iterations(const Problem& pr) { return pr.epilogue ? 4 * (1 + 7 * pr.epilogue) : 0; }

// The first tiles (largest first) that make enough workgroups to fill the device, else the smallest.
GemmTiles choose_tiles(const Problem& pr, const DeviceClass& dc) {
  const std::vector<GemmTiles>& choices = pr.kernel == Kernel::conv ? dc.conv_tiles : dc.gemm_tiles;
  for (const GemmTiles& t : choices) {
    if (ceil_div(pr.n, t.bn) * ceil_div(pr.m, t.bm) * pr.batches >= dc.gemm_fill) return t;
  }
  return choices.back();
}

// At least `needed` splits; more while the tiles leave the device idle (each split keeping
// kMinSplitK of K), fewer where the partial products would not fit one binding.
uint64_t split_count(const Problem& pr, const DeviceClass& dc, const GemmTiles& t, uint64_t needed, Op op) {
  const uint64_t tiles = ceil_div(pr.n, t.bn) * ceil_div(pr.m, t.bm) * pr.batches;
  uint64_t splits = needed;
  if (tiles < dc.gemm_fill) splits = std::max(splits, std::min(ceil_div(dc.gemm_fill, tiles), pr.k / kMinSplitK));
  splits = std::min(splits, kMaxSplits);
  while (splits > needed && workspace_bytes(pr, splits) > dc.max_binding_bytes) --splits;
  if (needed > kMaxSplits || (splits > 1 && workspace_bytes(pr, splits) > dc.max_binding_bytes)) {
    refuse(op, "K of " + std::to_string(pr.k) + " needs " + std::to_string(needed) +
                   " splits to stay within the loop budget of " + std::to_string(dc.loop_budget) +
                   " iterations, more than the workspace allows");
  }
  return splits;
}

Split plan_split(const Problem& pr, const DeviceClass& dc, Op op) {
  Split s;
  s.t = choose_tiles(pr, dc);
  s.workgroup = (s.t.bm / s.t.tm) * (s.t.bn / s.t.tn);
  s.step = dc.gemm == GemmFamily::direct ? 4 : s.t.bk;
  const uint64_t run = epilogue_iterations(pr);
  if (run + kMaxSplits >= dc.loop_budget) refuse(op, "the fused program is too long for the loop budget");
  // The results' store loop and a program run per 4 results; a program too long for that runs
  // in the reduction of (at least two) splits instead, once per 4 results.
  s.epilogue_iterations = pr.epilogue ? uint64_t(s.t.tm) * (s.t.tn / 4) * (1 + run) : 0;
  const uint64_t min_splits = s.epilogue_iterations > dc.loop_budget / 2 ? 2 : 1;
  if (min_splits > 1) s.epilogue_iterations = 0;
  const uint64_t steps = std::max<uint64_t>(ceil_div(pr.k, s.step), 1);
  const uint64_t needed = std::max(ceil_div(steps, dc.loop_budget - s.epilogue_iterations), min_splits);
  const uint64_t splits = split_count(pr, dc, s.t, needed, op);
  s.chunk = ceil_div(steps, splits) * s.step;
  s.splits = std::max(ceil_div(pr.k, s.chunk), min_splits);
  return s;
}

void flat_grid(Launch& l, uint64_t groups, const DeviceClass& dc, Op op) {
  const uint64_t x = std::min<uint64_t>(std::max<uint64_t>(groups, 1), dc.max_groups_x);
  const uint64_t y = ceil_div(std::max<uint64_t>(groups, 1), x);
  if (y > dc.max_groups_y) refuse(op, std::to_string(groups) + " workgroups exceed the device's grid");
  l.groups[0] = uint32_t(x);
  l.groups[1] = uint32_t(y);
  l.groups[2] = 1;
}

// The GEMM launch and, when K is split, the reduction of its partial products, which go to
// the workspace from element `workspace` on. Returns the elements it used there.
uint64_t emit(const Problem& pr, const DeviceClass& dc, Op op, Launch base, std::vector<Launch>& out,
              uint64_t workspace = 0) {
  const Split s = plan_split(pr, dc, op);
  const bool wide = pr.kernel == Kernel::matmul_fused;
  base.kernel = pr.kernel;
  std::copy(std::begin(pr.words), std::end(pr.words), base.push);
  base.push_words = 32;
  base.push[kM] = u32(op, pr.m, "M");
  base.push[kN] = u32(op, pr.n, "N");
  base.push[kK] = u32(op, pr.k, "K");
  base.push[kKChunk] = u32(op, s.chunk, "a K chunk");
  base.push[kSplits] = uint32_t(s.splits);
  base.push[kBatches] = u32(op, pr.batches, "the batch count");
  base.push[kWorkspaceBase] = u32(op, workspace, "the workspace");
  const GemmTiles& t = s.t;
  base.spec = {s.workgroup, kModeGemm, pr.operation, pr.a_along_k,  pr.b_along_n,
               pr.vec_a,    pr.vec_b,  pr.vec_c,     pr.n % 4 == 0, t.bm,
               t.bn,        t.bk,      t.tm,         t.tn,          dc.gemm == GemmFamily::direct};
  Launch g = base;
  g.groups[0] = u32(op, ceil_div(pr.n, t.bn), "the column tiles");
  g.groups[1] = u32(op, ceil_div(pr.m, t.bm), "the row tiles");
  g.groups[2] = u32(op, pr.batches * s.splits, "the batches");
  if (g.groups[0] > dc.max_groups_x || g.groups[1] > dc.max_groups_y || g.groups[2] > dc.max_groups_z)
    refuse(op, "the product is larger than the device's dispatch grid");
  g.loop_iterations = s.chunk / s.step + (s.splits == 1 ? s.epilogue_iterations : 0);
  if (s.splits == 1) {
    out.push_back(std::move(g));
    return 0;
  }
  g.bindings[wide ? 11 : 2] = kWorkspaceBinding;
  g.workspace_bytes = workspace * 4 + workspace_bytes(pr, s.splits);
  Launch r = base;
  r.spec[0] = dc.workgroup;
  r.spec[1] = kModeReduce;
  r.bindings[wide ? 11 : 0] = kWorkspaceBinding;
  r.workspace_bytes = g.workspace_bytes;
  r.barrier_before = true;
  flat_grid(r, ceil_div(pr.batches * pr.m * ceil_div(pr.n, 4), dc.workgroup), dc, op);
  r.loop_iterations = s.splits + epilogue_iterations(pr);
  out.push_back(std::move(g));
  out.push_back(std::move(r));
  return (workspace_bytes(pr, s.splits) / 4 + 3) / 4 * 4;  // the next part starts aligned for vec4s
}

// The first GEMM kernel (matmul_reference.comp), for comparisons: its own push layout.
void emit_reference(const Problem& pr, bool trans_a, bool trans_b, const DeviceClass& dc, Op op, Launch l,
                    std::vector<Launch>& out) {
  constexpr uint32_t tile = 64, bk = 16, threads = 256;
  l.kernel = Kernel::matmul_reference;
  const uint64_t words[] = {pr.m,
                            pr.n,
                            pr.k,
                            trans_a,
                            trans_b,
                            pr.words[kLda],
                            pr.words[kLdb],
                            pr.words[kBatchA],
                            pr.words[kBatchB],
                            pr.words[kBatchC]};
  for (size_t i = 0; i < std::size(words); ++i) l.push[i] = u32(op, words[i], "a size");
  l.push_words = uint32_t(std::size(words));
  l.spec = {threads, tile, tile, bk};
  l.groups[0] = u32(op, ceil_div(pr.n, tile), "the column tiles");
  l.groups[1] = u32(op, ceil_div(pr.m, tile), "the row tiles");
  l.groups[2] = u32(op, pr.batches, "the batches");
  // Per slice: two strided staging loops and the BK-deep product (its 4 x 4 loops unrolled).
  l.loop_iterations = ceil_div(pr.k, bk) * (2 * bk * tile / threads + bk);
  (void)dc;
  out.push_back(std::move(l));
}

// Operand quads along the contiguous dimension, vec4 loads where rows and batches are aligned.
Problem matmul_problem(const Program& p, const Dispatch& d, const MatmulAttrs& a, uint32_t ra, uint32_t rb) {
  const Shape &as = p.tensors[ra].type.shape, &bs = p.tensors[rb].type.shape, &cs = p.tensors[d.write()].type.shape;
  Problem pr;
  pr.m = uint64_t(cs[cs.size() - 2]);
  pr.n = uint64_t(cs.back());
  pr.k = uint64_t(a.trans_a ? as[as.size() - 2] : as.back());
  pr.batches = uint64_t(p.tensors[d.write()].type.numel()) / std::max<uint64_t>(pr.m * pr.n, 1);
  const bool a_batched = as.size() > 2, b_batched = bs.size() > 2;
  uint64_t sa = a_batched ? pr.m * pr.k : 0, sb = b_batched ? pr.k * pr.n : 0, sc = pr.m * pr.n;
  if (a_batched && !b_batched && !a.trans_a) {  // shared weights: one tall GEMM
    pr.m *= pr.batches;
    pr.batches = 1;
    sa = sb = sc = 0;
  }
  const uint64_t lda = uint64_t(as.back()), ldb = uint64_t(bs.back());
  const uint64_t words[] = {lda, ldb, pr.n, sa, sb, sc};
  for (size_t i = 0; i < std::size(words); ++i) pr.words[kLda + i] = u32(d.op, words[i], "a stride");
  pr.a_along_k = !a.trans_a;
  pr.b_along_n = !a.trans_b;
  pr.vec_a = lda % 4 == 0 && sa % 4 == 0 && (a.trans_a ? pr.m : pr.k) % 4 == 0;
  pr.vec_b = ldb % 4 == 0 && sb % 4 == 0 && (a.trans_b ? pr.k : pr.n) % 4 == 0;
  pr.vec_c = pr.n % 4 == 0 && sc % 4 == 0;
  return pr;
}

// A 1x1 convolution with stride 1 and no padding over images of 4k pixels: per image a
// matmul with vec4 loads on both sides (forward: W X[n]; input gradient: W^T dY[n]).
bool pointwise_conv(const Dispatch& d, const ConvAttrs& a, const Shape& w, const Shape& y) {
  return d.op != Op::conv2d_backward_weight && a.groups == 1 && w[2] == 1 && w[3] == 1 && a.stride[0] == 1 &&
         a.stride[1] == 1 && a.pad[0] == 0 && a.pad[1] == 0 && (y[2] * y[3]) % 4 == 0;
}

Problem pointwise_problem(const Dispatch& d, const Shape& x, const Shape& w) {
  const uint64_t nb = uint64_t(x[0]), c = uint64_t(x[1]), hw = uint64_t(x[2] * x[3]), o = uint64_t(w[0]);
  const bool forward = d.op == Op::conv2d;
  Problem pr;
  pr.m = forward ? o : c;
  pr.n = hw;
  pr.k = forward ? c : o;
  pr.batches = nb;
  pr.a_along_k = forward;  // W is [o][c]: op(A) = W (forward) or W^T
  pr.vec_a = c % 4 == 0;
  pr.vec_b = pr.vec_c = true;
  const uint64_t words[] = {c, hw, hw, 0, pr.k * hw, pr.m * hw};  // lda, ldb, ldc, batch strides
  for (size_t i = 0; i < std::size(words); ++i) pr.words[kLda + i] = u32(d.op, words[i], "a stride");
  return pr;
}

void set_divisor(Problem& pr, size_t word, size_t shift_word, int byte, uint64_t d, Op op) {
  const FastDivisor f = fast_divisor(u32(op, d, "a size"));
  pr.words[word] = f.multiplier;
  pr.words[shift_word] |= f.shift << (8 * byte);
}

// The implicit GEMMs of conv.comp: rows, columns and K per pass (see its header).
// The words every pass shares: sizes, then kernel, stride, padding, dilation and group sizes.
Problem conv_base(const Dispatch& d, const ConvAttrs& a, const Shape& x, const Shape& w, const Shape& y) {
  Problem pr;
  pr.kernel = Kernel::conv;
  pr.batches = uint64_t(a.groups);
  pr.b_along_n = false;
  const int64_t words[] = {x[1],
                           x[2],
                           x[3],
                           w[0],
                           y[2],
                           y[3],
                           -1,
                           -1,
                           -1,
                           w[2],
                           w[3],
                           a.stride[0],
                           a.stride[1],
                           a.pad[0],
                           a.pad[1],
                           a.dilation[0],
                           a.dilation[1],
                           x[1] / a.groups,
                           w[0] / a.groups};
  for (size_t i = 0; i < std::size(words); ++i) {
    if (words[i] == -1) continue;  // the shared words 9-11
    if (words[i] < 0) refuse(d.op, "negative padding, stride or dilation");
    pr.words[kC + i] = u32(d.op, uint64_t(words[i]), "a size");
  }
  return pr;
}

void set_divisors(Problem& pr, uint64_t taps, uint64_t tap_row, uint64_t pix, uint64_t row, Op op) {
  set_divisor(pr, kMKK, kShifts, 0, std::max<uint64_t>(taps, 1), op);
  set_divisor(pr, kMKW, kShifts, 1, std::max<uint64_t>(tap_row, 1), op);
  set_divisor(pr, kMPix, kShifts, 2, std::max<uint64_t>(pix, 1), op);
  set_divisor(pr, kMRow, kShifts, 3, std::max<uint64_t>(row, 1), op);
  pr.words[kPix] = u32(op, pix, "a size");
  pr.words[kRow] = u32(op, row, "a size");
}

// The input pixels r, r + s, ... of one stride phase along an axis, and the taps that reach
// them: i = i0 + step t for t < taps, moving the output pixel by `shift` per tap; the first
// output pixel is c0 + y' for the phase's pixel y'.
struct PhaseAxis {
  uint64_t pixels = 0, i0 = 0, step = 1, taps = 0, shift = 1;
  int64_t c0 = 0;
};
PhaseAxis phase_axis(int64_t r, int64_t stride, int64_t dilation, int64_t pad, int64_t kernel, int64_t size) {
  PhaseAxis p;
  p.pixels = r < size ? uint64_t((size - r + stride - 1) / stride) : 0;
  const int64_t g = std::gcd(dilation, stride);
  p.step = uint64_t(stride / g);
  p.shift = uint64_t(dilation / g);
  for (int64_t i = 0; i < std::min<int64_t>(kernel, stride / g); ++i) {
    if (((i * dilation - r - pad) % stride + stride) % stride != 0) continue;
    p.i0 = uint64_t(i);
    p.taps = uint64_t((kernel - i + stride / g - 1) / (stride / g));
    p.c0 = (r + pad - i * dilation) / stride;
    break;
  }
  return p;
}

// The implicit GEMMs of conv.comp (see its header): one for the forward pass and the weight
// gradient, one per stride phase for the input gradient.
std::vector<Problem> conv_problems(const Dispatch& d, const ConvAttrs& a, const Shape& x, const Shape& w,
                                   const Shape& y) {
  const uint64_t nb = uint64_t(x[0]), kh = uint64_t(w[2]), kw = uint64_t(w[3]), oh = uint64_t(y[2]),
                 ow = uint64_t(y[3]);
  const uint64_t cg = uint64_t(x[1] / a.groups), og = uint64_t(w[0] / a.groups);
  Problem pr = conv_base(d, a, x, w, y);
  if (d.op != Op::conv2d_backward_input) {
    const bool forward = d.op == Op::conv2d;
    pr.operation = forward ? kForward : kWeightGrad;
    pr.m = forward ? nb * oh * ow : cg * kh * kw;
    pr.n = og;
    pr.k = forward ? cg * kh * kw : nb * oh * ow;
    pr.vec_b = forward ? pr.k % 4 == 0 : (oh * ow) % 4 == 0;
    set_divisors(pr, kh * kw, kw, oh * ow, ow, d.op);
    return {pr};
  }
  std::vector<Problem> phases;
  pr.operation = kInputGrad;
  pr.n = cg;
  for (int64_t ry = 0; ry < a.stride[0]; ++ry) {
    for (int64_t rx = 0; rx < a.stride[1]; ++rx) {
      const PhaseAxis py = phase_axis(ry, a.stride[0], a.dilation[0], a.pad[0], int64_t(kh), x[2]);
      const PhaseAxis px = phase_axis(rx, a.stride[1], a.dilation[1], a.pad[1], int64_t(kw), x[3]);
      const uint64_t bytes[] = {uint64_t(ry), uint64_t(rx), py.taps, px.taps, py.i0, px.i0, py.step, px.step};
      if (*std::max_element(std::begin(bytes), std::end(bytes)) > 255) refuse(d.op, "strides or kernels above 255");
      Problem ph = pr;
      ph.m = nb * py.pixels * px.pixels;
      ph.k = og * py.taps * px.taps;
      ph.words[kPY] = uint32_t(int32_t(py.c0));
      ph.words[kPX] = uint32_t(int32_t(px.c0));
      ph.words[kDY] = uint32_t(py.shift);
      ph.words[kDX] = uint32_t(px.shift);
      ph.words[kTaps] = uint32_t(py.i0 | px.i0 << 8 | py.step << 16 | px.step << 24);
      ph.words[kPhase] = uint32_t(ry | rx << 8 | py.taps << 16 | px.taps << 24);
      set_divisors(ph, py.taps * px.taps, px.taps, py.pixels * px.pixels, px.pixels, d.op);
      if (ph.m) phases.push_back(ph);
    }
  }
  return phases;
}

// GEMM tiles for a device class, within its workgroup and shared-memory limits.
void gemm_tiles(DeviceClass& dc, const VulkanDeviceInfo& info) {
  if (dc.gemm == GemmFamily::direct) {
    // Workgroups of one to a few SIMD batches of 8 (a workgroup runs on one core); large
    // register blocks, since every load is a loop over the batch's lanes. A convolution's
    // gathered rows cost four loads a quad: fewer rows, more columns per invocation.
    dc.gemm_tiles = {{.bm = 32, .bn = 64, .bk = 4, .tm = 16, .tn = 8},
                     {.bm = 16, .bn = 32, .bk = 4, .tm = 8, .tn = 8},
                     {.bm = 8, .bn = 16, .bk = 4, .tm = 4, .tn = 4}};
    dc.conv_tiles = {{.bm = 32, .bn = 64, .bk = 4, .tm = 8, .tn = 16},
                     {.bm = 16, .bn = 32, .bk = 4, .tm = 8, .tn = 8},
                     {.bm = 8, .bn = 16, .bk = 4, .tm = 4, .tn = 4}};
    return;
  }
  // 128 x 128 with 8 x 8 per invocation (256 invocations), 64 x 64 with 8 x 4 (128), 32 x 32
  // and 16 x 16 with 4 x 4 (64, 16) for small products; BK 16, halved while the
  // double-buffered slices exceed the shared memory.
  std::vector<GemmTiles> tiles = {{.bm = 128, .bn = 128, .bk = 16, .tm = 8, .tn = 8},
                                  {.bm = 64, .bn = 64, .bk = 16, .tm = 8, .tn = 4},
                                  {.bm = 32, .bn = 32, .bk = 16, .tm = 4, .tn = 4},
                                  {.bm = 16, .bn = 16, .bk = 16, .tm = 4, .tn = 4}};
  auto shared_bytes = [](const GemmTiles& t) { return 2 * t.bk * (t.bm / 4 + 1 + t.bn / 4 + 1) * 16; };
  for (GemmTiles& t : tiles) {
    while (t.bk > 4 && shared_bytes(t) > info.max_shared_memory) t.bk /= 2;
  }
  std::erase_if(tiles, [&](const GemmTiles& t) {
    return shared_bytes(t) > info.max_shared_memory || (t.bm / t.tm) * (t.bn / t.tn) > dc.max_workgroup;
  });
  if (tiles.empty()) {
    throw std::invalid_argument("[vulkan] " + info.name +
                                "'s workgroup or shared-memory limits are below the GEMM kernels' smallest tiles");
  }
  dc.gemm_tiles = dc.conv_tiles = tiles;
}

}  // namespace

FastDivisor fast_divisor(uint32_t d) {
  if (d <= 1) return {0, 0};
  const uint32_t l = uint32_t(std::bit_width(d - 1));  // ceil(log2 d)
  const uint64_t m = ((uint64_t(1) << (31 + l)) + d - 1) / d;
  return {uint32_t(m), l};
}

void lower_matmul(const Program& p, const Dispatch& d, const DeviceClass& dc, Launch base, std::vector<Launch>& out) {
  const auto& a = std::get<MatmulAttrs>(d.attrs);
  Problem pr = matmul_problem(p, d, a, d.reads[0], d.reads[1]);
  base.bindings[0] = d.reads[0];
  base.bindings[1] = d.reads[1];
  base.bindings[2] = d.write();
  if (pr.m * pr.n * pr.batches == 0) return;
  if (dc.gemm == GemmFamily::naive) return emit_reference(pr, a.trans_a, a.trans_b, dc, d.op, std::move(base), out);
  emit(pr, dc, d.op, std::move(base), out);
}

void lower_matmul_epilogue(const Program& p, const Dispatch& d, const DeviceClass& dc, Launch base,
                           std::vector<Launch>& out) {
  const auto& a = std::get<FusedAttrs>(d.attrs);
  Problem pr = matmul_problem(p, d, a.matmul, d.reads[0], d.reads[1]);
  pr.kernel = Kernel::matmul_fused;
  pr.epilogue = a.code.size();
  for (const FusedInstr& f : a.code) {
    if (f.kind == FusedInstr::store || f.kind == FusedInstr::load) refuse(d.op, "a program with several outputs");
  }
  if (d.reads.size() > 2 + 7) refuse(d.op, std::to_string(d.reads.size() - 2) + " epilogue inputs (at most 7)");
  // The schedule's elementwise layout (words 0-10) moves to the kernel's epilogue words.
  for (size_t i = 0; i <= ElementwiseLayout::kInputs; ++i) pr.words[kEpilogueLayout + i] = base.push[i];
  pr.words[kPushCodeLength] = base.push[kPushCodeLength];
  for (uint32_t& b : base.bindings) b = d.reads[0];
  base.bindings[0] = d.reads[0];
  base.bindings[1] = d.reads[1];
  for (size_t i = 2; i < d.reads.size(); ++i) base.bindings[i == 8 ? 10 : i] = d.reads[i];  // program input i - 1
  base.bindings[8] = d.write();
  base.bindings[9] = kCodeBinding;
  if (pr.m * pr.n * pr.batches == 0) return;
  emit(pr, dc, d.op, std::move(base), out);
}

void lower_conv(const Program& p, const Dispatch& d, const DeviceClass& dc, Launch base, std::vector<Launch>& out) {
  const auto& a = std::get<ConvAttrs>(d.attrs);
  auto shape = [&](uint32_t t) -> const Shape& { return p.tensors[t].type.shape; };
  const Shape& x = d.op == Op::conv2d_backward_input ? shape(d.write()) : shape(d.reads[0]);
  const Shape& w = d.op == Op::conv2d_backward_weight ? shape(d.write()) : shape(d.reads[1]);
  const Shape& y = d.op == Op::conv2d                  ? shape(d.write())
                   : d.op == Op::conv2d_backward_input ? shape(d.reads[0])
                                                       : shape(d.reads[1]);
  if (x.size() != 4 || w.size() != 4 || y.size() != 4) refuse(d.op, "convolutions over 4-D tensors only");
  if (a.groups < 1 || x[1] % a.groups || w[0] % a.groups || a.stride[0] < 1 || a.stride[1] < 1)
    refuse(d.op, "groups must divide the channels and strides be positive");
  base.bindings[0] = d.reads[0];
  base.bindings[1] = d.reads[1];
  base.bindings[2] = d.write();
  if (numel(x) * numel(w) * numel(y) == 0) return;
  if (pointwise_conv(d, a, w, y)) {
    std::swap(base.bindings[0], base.bindings[1]);  // A: the weights; B: x or dY
    emit(pointwise_problem(d, x, w), dc, d.op, std::move(base), out);
    return;
  }
  uint64_t workspace = 0;  // the input gradient's phases run together: disjoint workspace parts
  for (const Problem& pr : conv_problems(d, a, x, w, y)) workspace += emit(pr, dc, d.op, base, out, workspace);
}

void gemm_device_class(DeviceClass& dc, const VulkanDeviceInfo& info, VulkanOptions::Kernels kernels) {
  const bool cpu = info.type == "cpu";
  // llvmpipe runs a thread per core; a GPU needs a few workgroups per compute unit.
  dc.gemm_fill = cpu ? 4 * std::max(1u, std::thread::hardware_concurrency()) : info.type == "discrete" ? 256 : 64;
  switch (kernels) {
    case VulkanOptions::Kernels::automatic: dc.gemm = cpu ? GemmFamily::direct : GemmFamily::shared_memory; break;
    case VulkanOptions::Kernels::shared_memory: dc.gemm = GemmFamily::shared_memory; break;
    case VulkanOptions::Kernels::direct: dc.gemm = GemmFamily::direct; break;
    case VulkanOptions::Kernels::naive: dc.gemm = GemmFamily::naive; break;
  }
  gemm_tiles(dc, info);
}

}  // namespace meganeura::vk
