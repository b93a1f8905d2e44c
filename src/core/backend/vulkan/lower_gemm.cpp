#include "backend/vulkan/lower_gemm.h"

#include <algorithm>
#include <bit>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>

#include "backend/vulkan/gemm_problem.h"
#include "graph/op_table.h"
#include "schedule/schedule.h"

namespace meganeura::vk {
namespace gemm {

[[noreturn]] void refuse(Op op, const std::string& why) {
  throw std::invalid_argument("[vulkan:" + std::string(op_name(op)) + "] " + why);
}

uint32_t half_format(DType t) { return t == DType::f16 ? kHalfF16 : t == DType::bf16 ? kHalfBf16 : kHalfF32; }

uint32_t u32(Op op, uint64_t v, const char* what) {
  if (v > UINT32_MAX) refuse(op, std::string(what) + " of " + std::to_string(v) + " exceeds 32 bits");
  return uint32_t(v);
}

namespace {

// A split keeps at least this much of K (its partial products cost a write and a read), and
// the reduction sums at most this many splits.
constexpr uint64_t kMinSplitK = 128, kMaxSplits = 64;

struct Split {
  GemmTiles t;
  uint32_t workgroup = 0;
  uint64_t step = 4, chunk = 4, splits = 1;  // K per loop iteration, per split
  uint64_t epilogue_iterations = 0;          // the fused program's loop, per invocation
};

uint64_t workspace_bytes(const Problem& pr, uint64_t splits) { return splits * pr.batches * pr.m * pr.n * 4; }

// One run of the fused program over 4 results (epilogue.glsl): per result the loop's back-edge
// and, per instruction at most, up to 7 iterations computing a broadcast input's offset.
uint64_t epilogue_iterations(const Problem& pr) { return pr.epilogue ? 4 * (1 + 7 * pr.epilogue) : 0; }

// The first tiles (largest first) that make enough workgroups to fill the device, else the smallest.
GemmTiles choose_tiles(const Problem& pr, const DeviceClass& dc) {
  const std::vector<GemmTiles>& choices = dc.gemm_tiles;
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

}  // namespace

void flat_grid(Launch& l, uint64_t groups, const DeviceClass& dc, Op op) {
  const uint64_t x = std::min<uint64_t>(std::max<uint64_t>(groups, 1), dc.max_groups_x);
  const uint64_t y = ceil_div(std::max<uint64_t>(groups, 1), x);
  if (y > dc.max_groups_y) refuse(op, std::to_string(groups) + " workgroups exceed the device's grid");
  l.groups[0] = uint32_t(x);
  l.groups[1] = uint32_t(y);
  l.groups[2] = 1;
}

uint64_t emit(const Problem& pr, const DeviceClass& dc, Op op, Launch base, std::vector<Launch>& out,
              uint64_t workspace) {
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
               t.bn,        t.bk,      t.tm,         t.tn,          dc.gemm == GemmFamily::direct,
               pr.half};
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
  r.spec[15] &= ~0xfu;  // it reads the partial products (f32); it stores as the GEMM would
  r.bindings[wide ? 11 : 0] = kWorkspaceBinding;
  r.workspace_bytes = g.workspace_bytes;
  r.barrier_before = true;
  flat_grid(r, ceil_div(pr.batches * pr.m * ceil_div(pr.n, 4), dc.workgroup), dc, op);
  r.loop_iterations = s.splits + epilogue_iterations(pr);
  out.push_back(std::move(g));
  out.push_back(std::move(r));
  return (workspace_bytes(pr, s.splits) / 4 + 3) / 4 * 4;  // the next part starts aligned for vec4s
}

}  // namespace gemm

namespace {

using namespace gemm;
constexpr size_t kEpilogueLayout = 12;  // epilogue.glsl: the schedule's elementwise layout

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
  pr.half = half_format(p.tensors[ra].stored) | half_format(p.tensors[rb].stored) << 2;
  return pr;
}

// GEMM tiles for a device class, within its workgroup and shared-memory limits.
void gemm_tiles(DeviceClass& dc, const VulkanDeviceInfo& info) {
  if (dc.gemm == GemmFamily::direct) {
    // Workgroups of two SIMD batches of 8 (a workgroup runs on one core), 16 x 8 per invocation
    // since every load is a loop over the batch's lanes (measured on lavapipe: 16 x 16 and
    // 8 x 16 no faster, 8 x 4 and 8 x 8 slower); smaller blocks for small products.
    dc.gemm_tiles = {{.bm = 32, .bn = 64, .bk = 4, .tm = 16, .tn = 8},
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
    return shared_bytes(t) > info.max_shared_memory || (t.bm / t.tm) * (t.bn / t.tn) > dc.max_workgroup();
  });
  if (tiles.empty()) {
    throw std::invalid_argument("[vulkan] " + info.name +
                                "'s workgroup or shared-memory limits are below the GEMM kernels' smallest tiles");
  }
  dc.gemm_tiles = tiles;
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
  if (dc.gemm == GemmFamily::naive) {
    if (pr.half) refuse(d.op, "the reference GEMM kernel reads f32 operands only");
    return emit_reference(pr, a.trans_a, a.trans_b, dc, d.op, std::move(base), out);
  }
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
  // A result in 16 bits: the program ends in the rounding, and rows hold whole words.
  if (const uint32_t c = half_format(p.tensors[d.write()].stored); c != kHalfF32) {
    const FusedInstr& last = a.code.back();
    if (last.kind != FusedInstr::unary || last.op != (c == kHalfF16 ? Op::round_f16 : Op::round_bf16) || pr.n % 2)
      refuse(d.op, "a 16-bit result needs a program ending in its rounding and an even row length");
    pr.half |= c << 4;
  }
  // The schedule's elementwise layout (words 0-10) moves to the kernel's epilogue words.
  for (size_t i = 0; i <= ElementwiseLayout::kInputs; ++i) pr.words[kEpilogueLayout + i] = base.push[i];
  for (uint32_t& b : base.bindings) b = d.reads[0];
  base.bindings[0] = d.reads[0];
  base.bindings[1] = d.reads[1];
  for (size_t i = 2; i < d.reads.size(); ++i) base.bindings[i == 8 ? 10 : i] = d.reads[i];  // program input i - 1
  base.bindings[8] = d.write();
  if (pr.m * pr.n * pr.batches == 0) return;
  emit(pr, dc, d.op, std::move(base), out);
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
