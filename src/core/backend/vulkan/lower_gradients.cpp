// Pooling (pool.comp), the index ops (index.comp) and the workload kernels (workload.comp):
// where, gather and the scatter-adds of the embedding and gather gradients, and the fused
// cross-entropy, with their planned loop bounds; and matmul_q and embeddings from block-format
// tables (matmul_q.comp, matmul_q_gemm.comp).
#include <algorithm>
#include <cstring>

#include "backend/vulkan/gemm_problem.h"
#include "backend/vulkan/lowering_internal.h"

namespace meganeura::vk::detail {
namespace {

// matmul_q with at least this many rows runs on the GEMM core: its tiles read a weight once
// per row tile, where an output per invocation reads it once per row.
constexpr uint64_t kGemmRows = 8;

// Indices per scatter-add launch: an invocation walks at most one chunk, and a chunk's launch
// costs chunk x (its invocations) comparisons.
constexpr uint64_t kScatterChunk = 256;

// The loops of one invocation of a scatter-add over a chunk: whether an earlier index of the
// chunk matches, then the sum over the later ones (lanes of one SIMD batch may sit at
// different indices, so each loop may run the chunk's length).
constexpr uint64_t scatter_cost(uint64_t chunk) { return 2 * loop(chunk); }

}  // namespace

void lower_pool(const Context& c, const Dispatch& d, Launch l, std::vector<Launch>& out) {
  Push pc{l};
  const uint64_t total = c.numel_of(d.write());
  if (d.op == Op::upsample_nearest2x) {
    const Shape& xs = c.shape(d.reads[0]);
    pc.u(total);
    pc.u(4);
    pc.u(uint64_t(xs[2]));
    pc.u(uint64_t(xs[3]));
    for (int i = 0; i < 8; ++i) pc.u(0);
    l.loop_iterations = 0;
  } else {
    const auto& a = std::get<PoolAttrs>(d.attrs);
    const bool backward = d.op == Op::max_pool2d_backward || d.op == Op::avg_pool2d_backward;
    const Shape& xs = backward ? c.shape(d.write()) : c.shape(d.reads[0]);
    const Shape& ys = d.op == Op::max_pool2d_backward ? c.shape(d.reads[1])
                      : backward                      ? c.shape(d.reads[0])
                                                      : c.shape(d.write());
    uint32_t code = d.op == Op::max_pool2d ? 0 : d.op == Op::max_pool2d_backward ? 1 : d.op == Op::avg_pool2d ? 2 : 3;
    pc.u(total);
    pc.u(code);
    pc.u(uint64_t(xs[2]));
    pc.u(uint64_t(xs[3]));
    pc.u(uint64_t(ys[2]));
    pc.u(uint64_t(ys[3]));
    pc.u(uint64_t(a.kernel[0]));
    pc.u(uint64_t(a.kernel[1]));
    pc.i(a.stride[0]);
    pc.i(a.stride[1]);
    pc.i(a.pad[0]);
    pc.i(a.pad[1]);
    const uint64_t kh = uint64_t(a.kernel[0]), kw = uint64_t(a.kernel[1]);
    const uint64_t window = nest(kh, loop(kw));  // one window's scan (argmax or sum)
    // The windows covering one input element: ceil(k / s) per axis.
    const uint64_t wy = ceil_div(kh, uint64_t(a.stride[0])), wx = ceil_div(kw, uint64_t(a.stride[1]));
    const uint64_t per_window = d.op == Op::max_pool2d_backward ? window : 0;
    l.loop_iterations = backward ? nest(wy, nest(wx, per_window)) : window;
  }
  l.bindings[0] = d.reads[0];
  l.bindings[1] = d.reads.size() > 1 ? d.reads[1] : d.reads[0];
  l.bindings[2] = d.write();
  elementwise_grid(l, total, c.dc);
  out.push_back(std::move(l));
}

void lower_index(const Context& c, const Dispatch& d, Launch l, std::vector<Launch>& out) {
  Push pc{l};
  const uint64_t n = c.numel_of(d.write());
  const Shape& ys = c.shape(d.write());
  l.bindings[2] = d.write();
  l.loop_iterations = 0;
  if (d.op == Op::embedding || d.op == Op::one_hot) {
    const bool embed = d.op == Op::embedding;
    const int64_t classes = embed ? 0 : std::get<OneHotAttrs>(d.attrs).classes;
    pc.u(n);
    pc.u(embed ? 0 : 2);
    pc.u(embed ? uint64_t(c.shape(d.reads[0])[0]) : 0);
    pc.u(embed ? uint64_t(c.shape(d.reads[0])[1]) : uint64_t(classes));
    pc.u(c.numel_of(d.reads[embed ? 1 : 0]));
    pc.i(embed ? 0 : std::get<OneHotAttrs>(d.attrs).ignore_index);
    const DType table = c.p.tensors[d.reads[0]].stored;
    pc.u(0);
    pc.u(0);
    pc.u(!embed || table == DType::f32 ? 0 : table == DType::f16 ? 1 : 2);  // index.comp's format (half.glsl)
    l.bindings[0] = d.reads[0];
    l.bindings[1] = embed ? d.reads[1] : d.reads[0];
    elementwise_grid(l, n, c.dc);
    out.push_back(std::move(l));
    return;
  }
  // embedding_backward: zero the table, then a launch per chunk of ids, each after the last.
  const uint64_t rows = uint64_t(ys[0]), dim = uint64_t(ys[1]), count = c.numel_of(d.reads[1]);
  l.bindings[0] = d.reads[0];
  l.bindings[1] = d.reads[1];
  Launch zero = l;
  Push zp{zero};
  for (uint64_t w : {n, uint64_t(3), rows, dim, count, uint64_t(0), uint64_t(0), uint64_t(0)}) zp.u(w);
  elementwise_grid(zero, n, c.dc);
  out.push_back(std::move(zero));
  for (uint64_t first = 0; first < count; first += kScatterChunk) {
    const uint64_t last = std::min(count, first + kScatterChunk);
    Launch chunk = l;
    Push cp{chunk};
    for (uint64_t w : {(last - first) * dim, uint64_t(1), rows, dim, count, uint64_t(0), first, last}) cp.u(w);
    chunk.barrier_before = true;
    chunk.loop_iterations = scatter_cost(last - first);
    elementwise_grid(chunk, (last - first) * dim, c.dc);
    out.push_back(std::move(chunk));
  }
}

namespace {

enum : uint32_t { kWhere, kGather, kGatherBackward, kRows, kTotal, kBackward, kZero, kCount };

// gather_backward: zero the output, then a launch per chunk of indices.
void scatter_add(const Context& c, const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out) {
  const uint64_t outer = k.push.get(push::kIndexRows), inner = k.push.get(push::kIndexWidth);
  const uint64_t count = k.push.get(push::kIndexCount), n = c.numel_of(d.write());
  Launch zero = l;
  zero.push[kPushMode] = kZero;
  zero.push[ElementwiseLayout::kNumel] = uint32_t(n);
  zero.loop_iterations = 0;
  elementwise_grid(zero, n, c.dc);
  out.push_back(std::move(zero));
  for (uint64_t first = 0; first < count; first += kScatterChunk) {
    const uint64_t last = std::min(count, first + kScatterChunk);
    Launch chunk = l;
    chunk.push[kPushMode] = kGatherBackward;
    chunk.push[kPushFirst] = uint32_t(first);
    chunk.push[kPushLast] = uint32_t(last);
    chunk.barrier_before = true;
    chunk.loop_iterations = scatter_cost(last - first);
    elementwise_grid(chunk, outer * (last - first) * inner, c.dc);
    out.push_back(std::move(chunk));
  }
}

// The fused cross-entropy: forward, each row's loss into the workspace (a workgroup per row),
// then one workgroup's mean; backward, one workgroup counts the rows that count into the
// workspace, then a workgroup per row writes its gradient.
void cross_entropy(const Context& c, const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out) {
  const int64_t ignore = std::get<OneHotAttrs>(d.attrs).ignore_index;
  // An ignore id outside i32 matches no target: the smallest i32, itself out of range.
  const int32_t ignore32 = ignore < INT32_MIN || ignore > INT32_MAX ? INT32_MIN : int32_t(ignore);
  std::memcpy(&l.push[kPushIgnore], &ignore32, 4);
  const uint32_t rows = k.push.get(push::kIndexRows), classes = k.push.get(push::kIndexWidth);
  const uint32_t wg = c.dc.row_workgroup;
  l.spec = {wg};
  l.bindings[3] = kWorkspaceBinding;
  const uint64_t row_lse = 2 * strided(classes, wg) + 2 * tree(wg);
  const uint64_t rows_walk = strided(rows, wg);  // one workgroup over all rows
  Launch all = l;                                // the one-workgroup launch: the mean, or the count
  all.push[kPushMode] = d.op == Op::softmax_cross_entropy ? kTotal : kCount;
  all.loop_iterations = rows_walk + 2 * tree(wg);
  grid(all, 1, c.dc);
  Launch per_row = l;
  per_row.push[kPushMode] = d.op == Op::softmax_cross_entropy ? kRows : kBackward;
  per_row.loop_iterations = row_lse + strided(classes, wg);
  grid(per_row, rows, c.dc);
  if (d.op == Op::softmax_cross_entropy) {
    per_row.workspace_bytes = all.workspace_bytes = uint64_t(rows) * 4;
    all.barrier_before = true;
    out.push_back(std::move(per_row));
    out.push_back(std::move(all));
  } else {
    per_row.workspace_bytes = all.workspace_bytes = 4;
    per_row.barrier_before = true;
    out.push_back(std::move(all));
    out.push_back(std::move(per_row));
  }
}

// top_k (top_k.comp): a workgroup per row. Per invocation: four radix passes over its strided
// share of the row (each after clearing the bins, invocation 0 then walking them), the pass
// gathering the entries above the threshold, two over its contiguous chunk for the equal ones,
// invocation 0's prefix over the chunks, and its candidates' places among the k.
void top_k(const Context& c, const KernelLaunch& k, Launch l, std::vector<Launch>& out) {
  constexpr uint32_t kMaxGroup = 256, kBins = 256, kRadixPasses = 4;
  const uint32_t rows = k.push.get(push::kIndexRows), n = k.push.get(push::kIndexWidth),
                 count = k.push.get(push::kIndexCount);
  const uint32_t wg = std::min(c.dc.row_workgroup, kMaxGroup);
  l.kernel = Kernel::top_k;
  l.spec = {wg};
  const uint64_t share = strided(n, wg), chunk = loop(ceil_div(n, wg));
  l.loop_iterations = kRadixPasses * (strided(kBins, wg) + share + loop(kBins)) + share + 2 * chunk + loop(wg) +
                      nest(ceil_div(count, wg), loop(count));
  grid(l, rows, c.dc);
  out.push_back(std::move(l));
}

}  // namespace

// matmul_q.comp: matmul_q, an output per invocation and a loop over its weight row's blocks
// (the 32 values of a block unrolled), for up to kGemmRows - 1 rows (decode steps); more rows
// (prompt chunks) run on the GEMM core's tiles (matmul_q_gemm.comp); or embedding from a block-format table, a value
// per invocation (the ids at binding 0, the table at 1). The mode word: bit 0 Q4_0, bit 1 a gather.
void lower_matmul_q(const Context& c, const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out) {
  wide_operands(d, k, l, 2);
  l.kernel = c.dc.byte_storage ? Kernel::matmul_q_bytes : Kernel::matmul_q;
  const bool gather = d.op == Op::embedding;
  const uint32_t weights = gather ? d.reads[0] : d.reads[1];
  l.push[kPushMode] = (c.p.tensors[weights].stored == DType::q8_0 ? 0u : 1u) | (gather ? 2u : 0u);
  if (gather) {
    l.bindings[0] = d.reads[1];
    l.bindings[1] = d.reads[0];
    l.loop_iterations = 0;
    elementwise_grid(l, c.numel_of(d.write()), c.dc);
  } else {
    const uint64_t m = k.push.get(push::kMatmul), n = k.push.get(push::kMatmul + 1),
                   depth = k.push.get(push::kMatmul + 2);
    if (m >= kGemmRows && c.dc.gemm != GemmFamily::naive) {
      // The GEMM core's tiles (matmul_q_gemm.comp), the weight decoded as B's quads are loaded.
      gemm::Problem pr;
      pr.kernel = c.dc.byte_storage ? Kernel::matmul_q_gemm_bytes : Kernel::matmul_q_gemm;
      pr.operation = c.p.tensors[weights].stored == DType::q8_0 ? 0 : 1;
      pr.m = m, pr.n = n, pr.k = depth;
      pr.b_along_n = false;
      pr.vec_a = depth % 4 == 0;
      pr.vec_c = n % 4 == 0;
      pr.words[gemm::kLda] = gemm::u32(d.op, depth, "K");
      l.bindings[0] = d.reads[0];
      l.bindings[1] = d.reads[1];
      l.bindings[2] = d.write();
      gemm::emit(pr, c.dc, d.op, std::move(l), out);
      return;
    }
    l.loop_iterations = loop(depth / 32);
    elementwise_grid(l, m * n, c.dc);
  }
  out.push_back(std::move(l));
}

void lower_workload(const Context& c, const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out) {
  wide_operands(d, k, l, 3);
  if (d.op == Op::gather_backward) return scatter_add(c, d, k, std::move(l), out);
  if (d.op == Op::top_k) return top_k(c, k, std::move(l), out);
  if (d.op == Op::softmax_cross_entropy || d.op == Op::softmax_cross_entropy_backward) {
    return cross_entropy(c, d, k, std::move(l), out);
  }
  if (d.op == Op::where) {
    l.push[kPushMode] = kWhere;
    l.loop_iterations = 3 * loop(k.push.get(ElementwiseLayout::kRank));  // each operand's offset
  } else {
    l.push[kPushMode] = kGather;
    l.loop_iterations = 0;
  }
  elementwise_grid(l, c.numel_of(d.write()), c.dc);
  out.push_back(std::move(l));
}

}  // namespace meganeura::vk::detail
