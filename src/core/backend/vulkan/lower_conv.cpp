// The convolution passes as implicit GEMMs (shaders/conv.comp): the forward pass, the weight
// gradient, and the input gradient one GEMM per stride phase. Where the gathered operand's
// channels per group are a multiple of 4, it is first staged channels-last in the workspace
// (and the weights in the matching K order) so that every quad the GEMM reads is a vec4; 1x1
// stride-1 convolutions are batched matmuls.
#include <algorithm>
#include <array>
#include <numeric>
#include <variant>

#include "backend/vulkan/gemm_problem.h"
#include "backend/vulkan/lower_gemm.h"

namespace meganeura::vk {
namespace {

using namespace gemm;

// conv.comp's push words (see its header).
constexpr size_t kC = 3, kKH = 12, kGeometry = 14, kABase = 15, kPads = 16, kBBase = 17, kKK = 18, kKWd = 19, kCG = 20,
                 kMKK = 22, kMKW = 23, kMPix = 24, kMRow = 25, kPix = 26, kRow = 27, kShifts = 28, kTaps = 29,
                 kPhase = 31;
enum : uint32_t { kForward = 0, kInputGrad = 1, kWeightGrad = 2 };
constexpr uint32_t kModePermute = 2;

uint64_t round4(uint64_t n) { return (n + 3) / 4 * 4; }

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

void set_divisor(Problem& pr, size_t word, int byte, uint64_t d, Op op) {
  const FastDivisor f = fast_divisor(u32(op, std::max<uint64_t>(d, 1), "a size"));
  pr.words[word] = f.multiplier;
  pr.words[kShifts] |= f.shift << (8 * byte);
}

// K's groups and tap rows, the pixels per image and per line of the rows (or of K).
void set_divisors(Problem& pr, uint64_t group, uint64_t tap_row, uint64_t pix, uint64_t row, Op op) {
  pr.words[kKK] = u32(op, group, "a size");
  pr.words[kKWd] = u32(op, tap_row, "a size");
  pr.words[kPix] = u32(op, pix, "a size");
  pr.words[kRow] = u32(op, row, "a size");
  set_divisor(pr, kMKK, 0, group, op);
  set_divisor(pr, kMKW, 1, tap_row, op);
  set_divisor(pr, kMPix, 2, pix, op);
  set_divisor(pr, kMRow, 3, row, op);
}

struct Geometry {
  uint64_t nb, c, h, w, o, kh, kw, oh, ow, cg, og;
};

// The words every pass shares: sizes, kernel, strides and dilations (a byte each), paddings
// (16 bits each), group sizes.
Problem conv_base(const Dispatch& d, const ConvAttrs& a, const Geometry& g) {
  Problem pr;
  pr.kernel = Kernel::conv;
  pr.batches = uint64_t(a.groups);
  pr.b_along_n = false;
  const uint64_t sizes[] = {g.c, g.h, g.w, g.o, g.oh, g.ow};
  for (size_t i = 0; i < std::size(sizes); ++i) pr.words[kC + i] = u32(d.op, sizes[i], "a size");
  pr.words[kKH] = u32(d.op, g.kh, "a size");
  pr.words[kKH + 1] = u32(d.op, g.kw, "a size");
  const int64_t bytes[] = {a.stride[0], a.stride[1], a.dilation[0], a.dilation[1]};
  for (size_t i = 0; i < 4; ++i) {
    if (bytes[i] < 1 || bytes[i] > 255) refuse(d.op, "strides and dilations from 1 to 255 only");
    pr.words[kGeometry] |= uint32_t(bytes[i]) << (8 * i);
  }
  for (size_t i = 0; i < 2; ++i) {
    if (a.pad[i] < 0 || a.pad[i] > 32767) refuse(d.op, "paddings from 0 to 32767 only");
    pr.words[kPads] |= uint32_t(a.pad[i]) << (16 * i);
  }
  pr.words[kCG] = u32(d.op, g.cg, "a size");
  pr.words[kCG + 1] = u32(d.op, g.og, "a size");
  return pr;
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

// A staging copy (MODE_PERMUTE): out[base + e] = in[source + sum_d index_d(e) stride_d] over
// five dimensions, innermost last.
struct Permute {
  uint32_t tensor = 0;
  int64_t extents[5] = {1, 1, 1, 1, 1}, strides[5] = {}, source = 0;
  uint64_t base = 0;
};

// One stride phase of the input gradient: its GEMM, and where the phase's taps of the weights
// come from (channels-last only).
struct Pass {
  Problem problem;
  Permute weights;
  bool stage_weights = false;
};

Pass phase_pass(const Dispatch& d, const ConvAttrs& a, const Geometry& g, int64_t ry, int64_t rx, bool channels_last) {
  const PhaseAxis py = phase_axis(ry, a.stride[0], a.dilation[0], a.pad[0], int64_t(g.kh), int64_t(g.h));
  const PhaseAxis px = phase_axis(rx, a.stride[1], a.dilation[1], a.pad[1], int64_t(g.kw), int64_t(g.w));
  const uint64_t bytes[] = {uint64_t(ry), uint64_t(rx), py.taps, px.taps,  py.i0,
                            px.i0,        py.step,      px.step, py.shift, px.shift};
  if (*std::max_element(std::begin(bytes), std::end(bytes)) > 255) refuse(d.op, "strides or kernels above 255");
  if (std::abs(py.c0) > 32767 || std::abs(px.c0) > 32767) refuse(d.op, "paddings from 0 to 32767 only");
  Pass p;
  Problem& pr = p.problem;
  pr = conv_base(d, a, g);
  pr.operation = kInputGrad;
  pr.m = g.nb * py.pixels * px.pixels;
  pr.n = g.cg;
  pr.k = g.og * py.taps * px.taps;
  pr.words[kPads] = uint32_t(uint16_t(int16_t(py.c0))) | uint32_t(uint16_t(int16_t(px.c0))) << 16;
  pr.words[kGeometry] = (pr.words[kGeometry] & 0xffffu) | uint32_t(py.shift << 16 | px.shift << 24);
  pr.words[kTaps] = uint32_t(py.i0 | px.i0 << 8 | py.step << 16 | px.step << 24);
  pr.words[kPhase] = uint32_t(ry | rx << 8 | py.taps << 16 | px.taps << 24);
  pr.vec_a = pr.vec_b = channels_last;
  if (channels_last) {  // K (ti, tj, o) with o fastest; weights staged [g][c][ti][tj][o]
    set_divisors(pr, g.og, px.taps, py.pixels * px.pixels, px.pixels, d.op);
    const int64_t kk = int64_t(g.kh * g.kw), kw = int64_t(g.kw);
    p.weights.tensor = d.reads[1];
    p.weights.extents[0] = a.groups, p.weights.extents[1] = int64_t(g.cg), p.weights.extents[2] = int64_t(py.taps);
    p.weights.extents[3] = int64_t(px.taps), p.weights.extents[4] = int64_t(g.og);
    const int64_t og = int64_t(g.og), cg = int64_t(g.cg);
    p.weights.strides[0] = og * cg * kk, p.weights.strides[1] = kk, p.weights.strides[2] = int64_t(py.step) * kw;
    p.weights.strides[3] = int64_t(px.step), p.weights.strides[4] = cg * kk;
    p.weights.source = int64_t(py.i0) * kw + int64_t(px.i0);
    p.stage_weights = pr.k > 0;
  } else {  // K (o, ti, tj) with tj fastest over the weights as they are
    set_divisors(pr, py.taps * px.taps, px.taps, py.pixels * px.pixels, px.pixels, d.op);
  }
  return p;
}

// The passes of a convolution dispatch (conv.comp's header): the forward pass and the weight
// gradient one GEMM, the input gradient one per stride phase with input pixels.
std::vector<Pass> conv_passes(const Dispatch& d, const ConvAttrs& a, const Geometry& g, bool channels_last) {
  if (d.op == Op::conv2d_backward_input) {
    std::vector<Pass> phases;
    for (int64_t ry = 0; ry < a.stride[0]; ++ry) {
      for (int64_t rx = 0; rx < a.stride[1]; ++rx) {
        Pass p = phase_pass(d, a, g, ry, rx, channels_last);
        if (p.problem.m) phases.push_back(p);
      }
    }
    return phases;
  }
  Pass p;
  Problem& pr = p.problem;
  pr = conv_base(d, a, g);
  const bool forward = d.op == Op::conv2d;
  pr.operation = forward ? kForward : kWeightGrad;
  pr.m = forward ? g.nb * g.oh * g.ow : g.cg * g.kh * g.kw;
  pr.n = g.og;
  pr.k = forward ? g.cg * g.kh * g.kw : g.nb * g.oh * g.ow;
  pr.vec_a = channels_last;
  pr.a_along_k = forward || !channels_last;  // channels-last weight gradient: quads of 4 channels (rows)
  pr.vec_b = forward ? pr.k % 4 == 0 : (g.oh * g.ow) % 4 == 0;
  set_divisors(pr, channels_last ? g.cg : g.kh * g.kw, g.kw, g.oh * g.ow, g.ow, d.op);
  if (forward && channels_last) {  // weights staged [o][i][j][c]
    const int64_t kk = int64_t(g.kh * g.kw), cg = int64_t(g.cg);
    p.weights.tensor = d.reads[1];
    p.weights.extents[1] = int64_t(g.o), p.weights.extents[2] = int64_t(g.kh), p.weights.extents[3] = int64_t(g.kw);
    p.weights.extents[4] = cg;
    p.weights.strides[1] = cg * kk, p.weights.strides[2] = int64_t(g.kw), p.weights.strides[3] = 1;
    p.weights.strides[4] = kk;
    p.stage_weights = true;
  }
  return {p};
}

// A MODE_PERMUTE launch of conv.comp into the workspace; returns the elements written.
uint64_t emit_permute(const Permute& pm, const DeviceClass& dc, Op op, Launch base, std::vector<Launch>& out,
                      uint32_t half) {
  uint64_t numel = 1;
  for (int64_t e : pm.extents) numel *= uint64_t(e);
  base.kernel = Kernel::conv;
  // One pipeline for every staging copy: the GEMM constants at fixed small values.
  base.spec = {dc.workgroup, kModePermute, 0, 1, 0, 0, 0, 0, 0, 16, 16, 4, 4, 4, dc.gemm == GemmFamily::direct,
               half << 2};  // the source's format as B's
  std::fill(std::begin(base.push), std::end(base.push), 0u);
  base.push_words = 20;
  base.push[0] = u32(op, numel, "a staged tensor");
  base.push[1] = u32(op, pm.base, "the workspace");
  base.push[2] = uint32_t(pm.source);
  for (size_t d = 0; d < 5; ++d) {
    const FastDivisor f = fast_divisor(u32(op, uint64_t(pm.extents[d]), "a size"));
    base.push[3 + d] = uint32_t(pm.extents[d]);
    base.push[8 + d] = f.multiplier;
    base.push[13 + d / 4] |= f.shift << (8 * (d % 4));
    base.push[15 + d] = uint32_t(int32_t(pm.strides[d]));
  }
  base.bindings[0] = base.bindings[1] = pm.tensor;
  base.bindings[2] = kWorkspaceBinding;
  base.workspace_bytes = (pm.base + numel) * 4;
  base.loop_iterations = 0;  // the index decomposition is unrolled
  flat_grid(base, ceil_div(numel, dc.workgroup), dc, op);
  out.push_back(std::move(base));
  return round4(numel);
}

// The gathered operand (x, or dY for the input gradient) staged [n][y][x][c] at the
// workspace's start.
Permute channels_last_copy(const Dispatch& d, const Geometry& g) {
  const bool input_grad = d.op == Op::conv2d_backward_input;
  const int64_t c = int64_t(input_grad ? g.o : g.c), h = int64_t(input_grad ? g.oh : g.h);
  const int64_t w = int64_t(input_grad ? g.ow : g.w);
  Permute p;
  p.tensor = d.reads[0];
  p.extents[1] = int64_t(g.nb), p.extents[2] = h, p.extents[3] = w, p.extents[4] = c;
  p.strides[1] = c * h * w, p.strides[2] = w, p.strides[3] = 1, p.strides[4] = h * w;
  return p;
}

// The staging copies, then (after a barrier) each pass's GEMM reading them: A at the
// workspace's start, its staged weights after it, the partial products of split GEMMs after all.
// `half`: the formats of reads[0] and reads[1] (the copies read them as B; the weight
// gradient's GEMM reads dY, reads[1], where it is).
void emit_channels_last(const Dispatch& d, const Geometry& g, std::vector<Pass>& passes, const DeviceClass& dc,
                        const Launch& base, std::vector<Launch>& out, std::array<uint32_t, 2> half) {
  uint64_t used = emit_permute(channels_last_copy(d, g), dc, d.op, base, out, half[0]);
  for (Pass& p : passes) {
    p.problem.words[kABase] = 0;
    if (d.op == Op::conv2d_backward_weight) p.problem.half = half[1] << 2;  // B: dY as stored
    if (!p.stage_weights) continue;
    p.weights.base = used;
    p.problem.words[kBBase] = u32(d.op, used, "the workspace");
    used += emit_permute(p.weights, dc, d.op, base, out, half[1]);
  }
  Launch gemm = base;
  gemm.bindings[0] = kWorkspaceBinding;
  if (d.op != Op::conv2d_backward_weight) gemm.bindings[1] = kWorkspaceBinding;
  gemm.workspace_bytes = used * 4;  // the staged copies stay for the GEMMs
  gemm.barrier_before = true;
  for (const Pass& p : passes) {
    used += emit(p.problem, dc, d.op, gemm, out, used);
    gemm.barrier_before = false;
  }
}

}  // namespace

void lower_conv(const Program& p, const Dispatch& d, const DeviceClass& dc, Launch base, std::vector<Launch>& out) {
  const auto& a = std::get<ConvAttrs>(d.attrs);
  auto shape = [&](uint32_t t) -> const Shape& { return p.tensors[t].type.shape; };
  const Shape& x = d.op == Op::conv2d_backward_input ? shape(d.write()) : shape(d.reads[0]);
  const Shape& w = d.op == Op::conv2d_backward_weight ? shape(d.write()) : shape(d.reads[1]);
  const Shape& y = d.op == Op::conv2d                  ? shape(d.write())
                   : d.op == Op::conv2d_backward_input ? shape(d.reads[0])
                                                       : shape(d.reads[1]);
  if (x.size() != 4 || w.size() != 4 || y.size() != 4) refuse(d.op, "convolutions over 4-D tensors only");
  if (a.groups < 1 || x[1] % a.groups || w[0] % a.groups) refuse(d.op, "groups must divide the channels");
  base.bindings[0] = d.reads[0];
  base.bindings[1] = d.reads[1];
  base.bindings[2] = d.write();
  if (numel(x) * numel(w) * numel(y) == 0) return;
  // Both operands may be stored in 16 bits (half.glsl): x and the weights (forward), dY and the
  // weights (input gradient), x and dY (weight gradient).
  const uint32_t hx = half_format(p.tensors[d.reads[0]].stored);
  const uint32_t hw = half_format(p.tensors[d.reads[1]].stored);
  if (pointwise_conv(d, a, w, y)) {
    std::swap(base.bindings[0], base.bindings[1]);  // A: the weights; B: x or dY
    Problem pr = pointwise_problem(d, x, w);
    pr.half = hw | hx << 2;
    emit(pr, dc, d.op, std::move(base), out);
    return;
  }
  const Geometry g{uint64_t(x[0]),           uint64_t(x[1]), uint64_t(x[2]), uint64_t(x[3]), uint64_t(w[0]),
                   uint64_t(w[2]),           uint64_t(w[3]), uint64_t(y[2]), uint64_t(y[3]), uint64_t(x[1] / a.groups),
                   uint64_t(w[0] / a.groups)};
  // Channels-last when the gathered operand's channels per group come in quads.
  const bool channels_last = (d.op == Op::conv2d_backward_input ? g.og : g.cg) % 4 == 0;
  std::vector<Pass> passes = conv_passes(d, a, g, channels_last);
  // Channels-last: the staging copies read x and the weights (as B) and write f32 for the GEMM.
  if (channels_last) return emit_channels_last(d, g, passes, dc, base, out, {hx, hw});
  uint64_t workspace = 0;  // the input gradient's phases run together: disjoint workspace parts
  for (Pass& pass : passes) {
    pass.problem.half = hx | hw << 2;  // A: x gathered, B: the weights as they are
    workspace += emit(pass.problem, dc, d.op, base, out, workspace);
  }
}

}  // namespace meganeura::vk
