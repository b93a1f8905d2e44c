// attention_fused and its backward: flash attention with tiles chosen per launch to fit the
// device's shared memory and the loop budget (attention.comp), or, on CPU-emulated devices, a
// row per invocation (attention_rows.comp).
#include <algorithm>
#include <optional>
#include <string>

#include "backend/vulkan/gemm_problem.h"
#include "backend/vulkan/lowering_internal.h"

namespace meganeura::vk::detail {
namespace {

enum Mode : uint32_t { kForward, kGradQ, kGradKV, kDelta };

// attention.comp's fixed register blocking: row groups of kTx invocations, kTm rows each.
constexpr uint64_t kTx = 8, kTm = 4;

struct Dims {
  uint64_t b, hq, hkv, sq, sk, d, dv;
};

// One launch's tiles: the workgroup's invocations and the columns per streamed block.
struct Tiles {
  uint32_t wg = 0, bc = 0;
  uint64_t rows() const { return kTm * wg / kTx; }
};

// Floats of shared memory a mode's tiles take (attention.comp's layout).
uint64_t shared_floats(Mode m, const Dims& x, Tiles t) {
  const uint64_t br = t.rows(), rp = br + 1, cp = t.bc + 1;
  switch (m) {
    case kForward: return x.d * rp + x.d * cp + t.bc * x.dv + br * cp + br * kTx;
    case kGradQ: return (x.d + x.dv) * (rp + cp) + br * cp;
    case kGradKV: return (x.d + x.dv) * (rp + cp) + 2 * br * cp + 2 * t.bc;
    case kDelta: return 1;
  }
  return 0;
}

// The loop back-edges of one invocation: its tile loads (a strided loop each), and per
// streamed block the loads, the score products over the head (and dO V^T in the backward), and
// the accumulation over the block's columns.
uint64_t loop_bound(Mode m, const Dims& x, Tiles t) {
  if (m == kDelta) return loop(x.dv);  // one invocation per row, no tiles
  const uint64_t wg = t.wg, br = t.rows(), bc = t.bc;
  const uint64_t own = strided(br * x.d, wg) + (m == kForward ? 0 : strided(br * x.dv, wg));
  const uint64_t block_loads = strided(bc * x.d, wg) + strided(bc * x.dv, wg);
  switch (m) {
    case kForward: return own + nest(ceil_div(x.sk, bc), block_loads + loop(x.d) + loop(bc));
    case kGradQ: return own + nest(ceil_div(x.sk, bc), block_loads + loop(x.d) + loop(x.dv) + loop(bc));
    case kGradKV: {
      const uint64_t block = block_loads + strided(bc, wg) + loop(x.d) + loop(x.dv) + loop(bc);
      return own + nest(x.hq / x.hkv, nest(ceil_div(x.sq, bc), block));
    }
    case kDelta: break;
  }
  return 0;
}

// The tiles with the fewest planned loop iterations that fit the device's shared memory (ties:
// the larger workgroup); none when no candidate fits.
std::optional<Tiles> choose_tiles(Mode m, const Dims& x, const DeviceClass& dc) {
  std::optional<Tiles> best;
  uint64_t best_loops = 0;
  for (uint32_t wg : {128u, 64u, 32u}) {
    if (wg > dc.max_workgroup_invocations || wg > dc.max_workgroup_size_x) continue;
    for (uint32_t bc : {32u, 16u, 8u}) {
      const Tiles t{wg, bc};
      if (shared_floats(m, x, t) * 4 > dc.max_shared_memory) continue;
      const uint64_t loops = loop_bound(m, x, t);
      if (!best || loops < best_loops) best = t, best_loops = loops;
    }
  }
  return best;
}

// attention_rows.comp's back-edges per row of the other side (its loops over the head) and per
// launch besides them (loading and storing the head vectors).
uint64_t per_other_row(Mode m, const Dims& x) {
  switch (m) {
    case kForward: return loop(x.d) + loop(x.dv) + 1;
    case kGradQ: return 2 * loop(x.d) + loop(x.dv) + 1;
    case kGradKV: return (2 * loop(x.d) + 2 * loop(x.dv) + 1) * (x.hq / x.hkv);
    case kDelta: break;
  }
  return 0;
}
uint64_t per_launch(const Dims& x) { return 3 * loop(std::max(x.d, x.dv)) + 2 * loop(x.dv); }

// A row per invocation, the other side in chunks small enough for the loop budget, a launch
// each, every one after the last (they pass their running state on).
void by_rows(const Dispatch& d, Mode m, const Dims& x, const DeviceClass& dc, const Launch& l,
             std::vector<Launch>& chunks) {
  const uint64_t other = m == kGradKV ? x.sq : x.sk, cost = per_other_row(m, x);
  const uint64_t room = dc.loop_budget - std::min(dc.loop_budget, per_launch(x) + 64);
  const uint64_t chunk = std::min(other, room / (cost + 1));
  if (chunk == 0) unsupported(d.op, "one row of attention alone passes the device's loop budget");
  const uint32_t wg = dc.workgroup;
  const uint64_t heads = m == kGradKV ? x.b * x.hkv : x.b * x.hq, len = m == kGradKV ? x.sk : x.sq;
  for (uint64_t first = 0; first < other; first += chunk) {
    Launch c = l;
    c.kernel = Kernel::attention_rows;
    c.push[kPushMode] = m;
    c.push[kPushChunkFirst] = uint32_t(first);
    c.push[kPushChunkLast] = uint32_t(std::min(other, first + chunk));
    c.push[kPushChunkFlags] = (first == 0 ? 1u : 0u) | (first + chunk >= other ? 2u : 0u);
    c.spec = {wg, uint32_t(x.d), uint32_t(x.dv), 0, 0, m};
    c.loop_iterations = per_launch(x) + nest(c.push[kPushChunkLast] - first, cost);
    c.barrier_before = first > 0;
    grid(c, heads * ceil_div(len, wg), dc);
    chunks.push_back(std::move(c));
  }
}

Launch tiled(const Dispatch& d, Mode m, const Dims& x, const DeviceClass& dc, Launch l) {
  const std::optional<Tiles> t = choose_tiles(m, x, dc);
  if (!t) {
    unsupported(d.op, "head dimensions " + std::to_string(x.d) + "/" + std::to_string(x.dv) +
                          " need more shared memory than the device's " + std::to_string(dc.max_shared_memory) +
                          " bytes");
  }
  l.push[kPushMode] = m;
  l.spec = {t->wg, uint32_t(x.d), uint32_t(x.dv), t->bc, uint32_t(shared_floats(m, x, *t)), m};
  l.loop_iterations = loop_bound(m, x, *t);
  const uint64_t heads = m == kGradKV ? x.b * x.hkv : x.b * x.hq, len = m == kGradKV ? x.sk : x.sq;
  grid(l, heads * ceil_div(len, t->rows()), dc);
  return l;
}

}  // namespace

// The forward: a workgroup per block of query rows (one launch, or a launch per chunk of keys).
// The backward: each query row's dO . O - dlse into the workspace, then (after a barrier) the
// launches for dQ over query blocks and for dK and dV over key blocks, which write disjoint
// parts of the output.
void lower_attention(const Context& c, const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out) {
  wide_operands(d, k, l, 5);
  const auto& a = std::get<AttentionAttrs>(d.attrs);
  auto word = [&](size_t i) { return uint64_t(k.push.get(push::kAttention + i)); };
  const Dims x{word(0), word(1), word(2), word(3), word(4), word(5), word(6)};
  const uint64_t head = std::max(x.d, x.dv);
  if (head > kAttentionMaxHead) {
    unsupported(
        d.op, "head dimension " + std::to_string(head) + " exceeds the kernel's " + std::to_string(kAttentionMaxHead));
  }
  l.push[kPushScale] = fbits(a.scale);
  l.push[kPushCausal] = a.causal ? 1 : 0;
  const uint64_t rows = x.b * x.hq * x.sq;
  // q, k and v stored in 16 bits (half.glsl), forward and backward: the kernels' constant 15.
  uint32_t half = 0;
  for (uint32_t i = 0; i < 3; ++i) half |= gemm::half_format(c.p.tensors[d.reads[i]].stored) << (2 * i);
  auto with_half = [&](Launch f) {
    if (half) f.spec.resize(16, 0), f.spec[15] = half;
    return f;
  };
  if (d.op == Op::attention_fused) {
    if (!c.dc.row_attention) {
      out.push_back(with_half(tiled(d, kForward, x, c.dc, std::move(l))));
      return;
    }
    std::vector<Launch> chunks;
    by_rows(d, kForward, x, c.dc, l, chunks);
    for (Launch& k : chunks) {
      if (chunks.size() > 1) k.bindings[5] = kWorkspaceBinding, k.workspace_bytes = 2 * rows * 4;
      out.push_back(with_half(std::move(k)));
    }
    return;
  }
  l.bindings[5] = kWorkspaceBinding;
  l.workspace_bytes = rows * 4;
  Launch delta = l;
  delta.push[kPushMode] = kDelta;
  delta.spec = {c.dc.workgroup, uint32_t(x.d), uint32_t(x.dv), uint32_t(kTx), 1, kDelta};
  delta.loop_iterations = loop_bound(kDelta, x, {});
  grid(delta, ceil_div(rows, c.dc.workgroup), c.dc);
  out.push_back(std::move(delta));
  if (!c.dc.row_attention) {
    Launch dq = with_half(tiled(d, kGradQ, x, c.dc, l));
    dq.barrier_before = true;  // also orders the dK, dV launch after the shift
    out.push_back(std::move(dq));
    out.push_back(with_half(tiled(d, kGradKV, x, c.dc, std::move(l))));
    return;
  }
  // dQ's chunks and dK, dV's interleaved: a barrier before each pair orders both after their
  // previous chunk (and the first after the shift).
  std::vector<Launch> dq, dkv;
  by_rows(d, kGradQ, x, c.dc, l, dq);
  by_rows(d, kGradKV, x, c.dc, l, dkv);
  for (size_t t = 0; t < std::max(dq.size(), dkv.size()); ++t) {
    bool first = true;
    for (std::vector<Launch>* side : {&dq, &dkv}) {
      if (t >= side->size()) continue;
      Launch k = with_half(std::move((*side)[t]));
      k.barrier_before = first;
      first = false;
      out.push_back(std::move(k));
    }
  }
}

}  // namespace meganeura::vk::detail
