// The key/value cache ops on kv_cache.comp: the schedule's push block, the mode and its
// parameters after it, the position's buffer at binding 3 whatever its operand index.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "backend/vulkan/lowering_internal.h"

namespace meganeura::vk::detail {
namespace {

constexpr uint32_t kCopy = 0, kRows = 1, kAttend = 2, kRope = 3;
constexpr size_t kPushWindow = 26, kPushThetaLog2 = 25, kPushSign = 26;
// rope's scaling (rope_frequency): f * mix(1 / factor, 1, clamp(smooth_a * f - smooth_b, 0, 1)).
constexpr size_t kPushInvFactor = 27, kPushSmoothA = 28, kPushSmoothB = 29;
constexpr uint32_t kFirstChunk = 1, kLastChunk = 2;

// The output is the input's own memory: the same external buffer, or the same place in an arena.
bool same_memory(const Program& p, uint32_t a, uint32_t b) {
  const ProgramTensor &x = p.tensors[a], &y = p.tensors[b];
  if (x.external() || y.external()) return x.external() && y.external() && x.binding == y.binding;
  return x.buffer == y.buffer && x.offset == y.offset;
}

}  // namespace

void lower_kv_cache(const Context& c, const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out) {
  wide_operands(d, k, l, 4);
  l.bindings[3] = d.reads.back();  // the position is every op's last operand
  if (d.op == Op::kv_cache_write) {
    const uint64_t outer = k.push.get(push::kCacheOuter), s = k.push.get(push::kCacheRows),
                   tmax = k.push.get(push::kCacheLen), dim = k.push.get(push::kCacheDim);
    l.loop_iterations = 0;
    if (!same_memory(c.p, d.reads[0], d.write())) {  // not in place: the cache first
      Launch copy = l;
      copy.push[kPushMode] = kCopy;
      elementwise_grid(copy, outer * tmax * dim, c.dc);
      out.push_back(std::move(copy));
      l.barrier_before = true;
    }
    l.push[kPushMode] = kRows;
    elementwise_grid(l, outer * s * dim, c.dc);
    out.push_back(std::move(l));
  } else if (d.op == Op::cached_attention) {
    const auto& a = std::get<CachedAttentionAttrs>(d.attrs);
    auto word = [&](size_t i) { return uint64_t(k.push.get(push::kAttention + i)); };
    const uint64_t rows = word(0) * word(1) * word(3), tmax = word(4), dim = word(5), dv = word(6);
    if (dv > kAttentionMaxHead) {
      unsupported(d.op, "value head dimension " + std::to_string(dv) + " exceeds the kernel's " +
                            std::to_string(kAttentionMaxHead));
    }
    l.push[kPushMode] = kAttend;
    l.push[kPushScale] = fbits(a.scale);
    l.push[kPushWindow] = uint32_t(a.window);
    // One row per invocation, over the cache positions of its chunk: per position a dot
    // product over d and an update over dv; the accumulator's start and end over dv (loading
    // or clearing it, dividing or storing it). Chunks as long as the loop budget allows.
    const uint64_t fixed = 3 * loop(dv) + 1, per_key = loop(dim) + loop(dv);
    const uint64_t room = c.dc.loop_budget - std::min(c.dc.loop_budget, fixed);
    const uint64_t chunk = std::min<uint64_t>(tmax, room / (per_key + 1));
    if (chunk == 0) unsupported(d.op, "one cache position alone passes the device's loop budget");
    for (uint64_t first = 0; first < tmax; first += chunk) {
      Launch part = l;
      const uint64_t last = std::min(tmax, first + chunk);
      part.push[kPushChunkFirst] = uint32_t(first);
      part.push[kPushChunkLast] = uint32_t(last);
      part.push[kPushChunkFlags] = (first == 0 ? kFirstChunk : 0u) | (last == tmax ? kLastChunk : 0u);
      part.loop_iterations = fixed + nest(last - first, per_key);
      part.barrier_before = first > 0;
      if (chunk < tmax) part.bindings[5] = kWorkspaceBinding, part.workspace_bytes = 2 * rows * 4;
      elementwise_grid(part, rows, c.dc);
      out.push_back(std::move(part));
    }
  } else {  // rope_at
    const auto& a = std::get<RopeAttrs>(d.attrs);
    l.push[kPushMode] = kRope;
    l.push[kPushThetaLog2] = fbits(std::log2(a.theta));
    l.push[kPushSign] = fbits(a.inverse ? -1.0 : 1.0);
    const bool llama3 = a.original_max_position > 0;
    const double span = a.high_freq_factor - a.low_freq_factor;
    l.push[kPushInvFactor] = fbits(1.0 / a.factor);
    l.push[kPushSmoothA] = fbits(llama3 ? double(a.original_max_position) / (2 * std::numbers::pi * span) : 0.0);
    l.push[kPushSmoothB] = fbits(llama3 ? a.low_freq_factor / span : 0.0);
    l.loop_iterations = 0;
    elementwise_grid(l, k.push.get(push::kSeqRows) * (k.push.get(push::kSeqLen) / 2), c.dc);
    out.push_back(std::move(l));
  }
}

}  // namespace meganeura::vk::detail
