// The schedule: one lowering of a Program's dispatches to kernel launches, computed once and
// shared by the backends. Per dispatch it names the kernel (family and variant), its
// specialisation constants, a fixed 128-byte push-constant block of plain integers (sizes,
// extents, broadcast masks; f64 values as two words), the workgroup counts for the kernel's
// declared workgroup size, and the scratch bytes the kernel needs. The backend provides that
// scratch from one buffer of Schedule::workspace_bytes, allocated once per program.
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
// neighbours merged where every input agrees on broadcasting, at most kMaxRank remaining.
struct ElementwiseLayout {
  static constexpr size_t kMaxRank = 6;
  static constexpr size_t kNumel = 0, kRank = 1, kExtents = 2, kMasks = 8, kInputs = 10;
  // word kMasks + i / 4, bit (i % 4) * 8 + dim: input i spans that (collapsed) dimension
};
namespace push {  // word indices of the other kernels' blocks
constexpr size_t kReduceOuter = 11, kReduceLen = 12, kReduceInner = 13, kReduceKind = 14;
constexpr size_t kMatmul = 16;  // m, n, k, batch, a_batched, b_batched, trans_a, trans_b
constexpr size_t kRows = 0, kLen = 1;
constexpr size_t kNormGamma = 2, kNormBeta = 3, kNormCenter = 4, kNormEps = 5;
constexpr size_t kSoftmaxSq = 2, kSoftmaxCausal = 3, kSoftmaxScale = 4, kSoftmaxFill = 6;
constexpr size_t kConv = 0;  // n, c, h, w, o, kh, kw, oh, ow, groups
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
