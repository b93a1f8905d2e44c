// The schedule: one lowering of a Program's dispatches to kernel launches, computed once and
// shared by the backends. Per dispatch it names the kernel (family and variant), its
// specialisation constants, a fixed 128-byte push-constant block of plain integers (sizes,
// extents, broadcast masks; f64 values as two words), the workgroup counts for the kernel's
// declared workgroup size, and the scratch bytes the kernel needs. The backend provides that
// scratch from one buffer of Schedule::workspace_bytes, allocated once per program.
// Every kernel's sizes (element counts, extents, GEMM and convolution geometry) are in its push
// block: the CPU backend's kernels read them from there, never from tensor shapes; the Vulkan
// backend passes the fused kernels' blocks to its shaders.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "meganeura/program.h"

namespace meganeura {

struct SpecConstant {
  enum Type : uint8_t { u32, i32, f32 };
  std::string name;
  Type type = u32;
  uint32_t bits = 0;
  bool operator==(const SpecConstant&) const = default;
};

struct PushConstants {
  static constexpr size_t kWords = 32;  // 128 bytes: the minimum every Vulkan device supports
  std::array<uint32_t, kWords> words{};
  uint32_t used = 0;  // words set
  void set(size_t i, uint32_t v);
  void set_f64(size_t i, double v);  // words i (low) and i + 1 (high)
  uint32_t get(size_t i) const { return words[i]; }
  double get_f64(size_t i) const;
  bool operator==(const PushConstants&) const = default;
};

// Push-constant layout of the broadcasting elementwise kernels (fused_elementwise, the
// epilogue of matmul_epilogue, the domain of fused_reduce): dimensions of size 1 dropped and
// neighbours merged where every input agrees on broadcasting, at most kMaxDims remaining.
struct ElementwiseLayout {
  static constexpr size_t kMaxDims = 6;  // collapsed dimensions of a broadcast
  static constexpr size_t kNumel = 0, kRank = 1, kExtents = 2, kMasks = 8, kInputs = 10;
  // word kMasks + i / 4, bit (i % 4) * 8 + dim: input i spans that (collapsed) dimension
};
namespace push {  // word indices of the other kernels' blocks (every size a kernel uses is here)
// Unary ops, cast, clip_coef, reshape and the optimizer scalars: ElementwiseLayout::kNumel
// (output elements). Binary ops, where and broadcast_to: the full ElementwiseLayout (inputs in
// read order), required to fit. affine: scale and shift (f64) at kMasks and kMasks + 2.
constexpr size_t kMaxRank = 8;  // the one rank limit of the kernels: movement ops, non-contiguous reductions
// fused_reduce and the primitive reductions: rows before the reduced axes, the reduced length,
// elements after. Primitive kinds: 0 sum, 1 mean, 2 max, 3 softmax, 4 log_softmax (the last
// two over their axis). kReduceCount: input elements per output (mean's divisor); a reduction
// over non-contiguous axes has kReduceRank > 0, the input's extents at kReduceExtents and bit d
// of kReduceAxes set when dimension d is reduced; output elements at ElementwiseLayout::kNumel.
constexpr size_t kReduceOuter = 11, kReduceLen = 12, kReduceInner = 13, kReduceKind = 14;
constexpr size_t kReduceCount = 15, kReduceRank = 16, kReduceAxes = 17, kReduceExtents = 18;
constexpr size_t kMatmul = 16;  // m, n, k, batch, a_batched, b_batched, trans_a, trans_b
constexpr size_t kRows = 0, kLen = 1;
constexpr size_t kNormGamma = 2, kNormBeta = 3, kNormCenter = 4, kNormEps = 5;
constexpr size_t kSoftmaxSq = 2, kSoftmaxCausal = 3, kSoftmaxScale = 4, kSoftmaxFill = 6;
constexpr size_t kConv = 0;  // n, c, h, w, o, kh, kw, oh, ow, groups (forward convolution's view)
constexpr size_t kConvStride = 10, kConvPad = 12, kConvDilation = 14;  // (h, w) each
// max/avg pooling and their backward (forward view: x [n,c,h,w] -> y [n,c,oh,ow]);
// upsample_nearest2x: n, c, h, w of its input and oh = 2h, ow = 2w (window words 0).
constexpr size_t kPool = 0;  // n, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow
// permute, slice, pad: rank, input extents, output extents, and per dimension the input
// dimension (permute), start (slice) or leading padding (pad); rank <= kMaxRank.
constexpr size_t kMoveRank = 0, kMoveIn = 1, kMoveOut = kMoveIn + kMaxRank, kMoveParam = kMoveOut + kMaxRank;
// concat: outer (rows before the axis), inner (elements after it), input count, then each
// input's length along the axis (at most kConcatMaxInputs).
constexpr size_t kConcatOuter = 0, kConcatInner = 1, kConcatInputs = 2, kConcatLens = 3;
constexpr size_t kConcatMaxInputs = 29;
// embedding (+ backward): table rows, row width, id count. one_hot: width = classes, count =
// ids. gather (+ backward): rows = elements before the axis, width = elements after it,
// count = indices, kIndexAxis = the gathered axis' size. Cross-entropy (+ backward): rows,
// width = classes. top_k: rows, width = row length, count = k.
constexpr size_t kIndexRows = 0, kIndexWidth = 1, kIndexCount = 2, kIndexAxis = 3;
// rope: rows (all but the last dimension), row length (head dim) and positions per sequence;
// causal_mask: rows, keys per row (sk) and query positions (sq).
constexpr size_t kSeqRows = 0, kSeqLen = 1, kSeqPositions = 2;
// attention_fused (+ backward): b, hq, hkv, sq, sk, d, dv; cached_attention the same with the
// cache length (Tmax) as sk. rope_at: as rope.
constexpr size_t kAttention = 0;
// kv_cache_write: rows before the position axis (B * H), new rows S, cache length Tmax, row width.
constexpr size_t kCacheOuter = 0, kCacheRows = 1, kCacheLen = 2, kCacheDim = 3;
// The key/value cache ops (and rope_at): how many positions the position tensor holds (1, or
// one per sequence), after every block above.
constexpr size_t kCachePositions = 7;
}  // namespace push

struct KernelLaunch {
  std::string kernel;  // "family.variant", e.g. "gemm.nt", "fused_elementwise.3f2a..."
  std::vector<SpecConstant> spec;
  PushConstants push;
  std::array<uint32_t, 3> workgroup_size{1, 1, 1};
  std::array<uint32_t, 3> groups{1, 1, 1};
  uint64_t workspace_bytes = 0;
};

struct Schedule {
  std::vector<KernelLaunch> launches;  // one per dispatch, same order
  uint64_t workspace_bytes = 0;        // the largest launch's scratch
  std::string to_json() const;         // {"launches": [...], "workspace_bytes": n}
};

// Lowers every dispatch of `p`; throws std::invalid_argument("[schedule] ...") for a dispatch
// whose shapes do not fit the kernel's limits.
Schedule lower(const Program& p);

}  // namespace meganeura
