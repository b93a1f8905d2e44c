// The SPIR-V of every kernel, generated from shaders/*.comp by glslc at build time, with its
// storage buffers declared Aliased.
#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

#include "backend/vulkan/pipelines.h"

namespace meganeura::vk {
namespace {
const uint32_t kPointwise[] = {
#include "pointwise.spv.inc"
};
const uint32_t kReduce[] = {
#include "reduce.spv.inc"
};
const uint32_t kSoftmax[] = {
#include "softmax.spv.inc"
};
const uint32_t kMatmul[] = {
#include "matmul.spv.inc"
};
const uint32_t kMovement[] = {
#include "movement.spv.inc"
};
const uint32_t kIndex[] = {
#include "index.spv.inc"
};
const uint32_t kSequence[] = {
#include "sequence.spv.inc"
};
const uint32_t kConv[] = {
#include "conv.spv.inc"
};
const uint32_t kPool[] = {
#include "pool.spv.inc"
};
const uint32_t kFused[] = {
#include "fused.spv.inc"
};
const uint32_t kRows[] = {
#include "rows.spv.inc"
};
const uint32_t kRowsSubgroup[] = {
#include "rows_subgroup.spv.inc"
};
const uint32_t kReduceSubgroup[] = {
#include "reduce_subgroup.spv.inc"
};
const uint32_t kAttentionRows[] = {
#include "attention_rows.spv.inc"
};
const uint32_t kAttention[] = {
#include "attention.spv.inc"
};
const uint32_t kWorkload[] = {
#include "workload.spv.inc"
};
const uint32_t kMatmulFused[] = {
#include "matmul_fused.spv.inc"
};
const uint32_t kMatmulReference[] = {
#include "matmul_reference.spv.inc"
};
const uint32_t kKvCache[] = {
#include "kv_cache.spv.inc"
};
const uint32_t kTopK[] = {
#include "top_k.spv.inc"
};
const uint32_t kMatmulQ[] = {
#include "matmul_q.spv.inc"
};
const uint32_t kMatmulQGemm[] = {
#include "matmul_q_gemm.spv.inc"
};
const uint32_t kMatmulQBytes[] = {
#include "matmul_q_bytes.spv.inc"
};
const uint32_t kMatmulQGemmBytes[] = {
#include "matmul_q_gemm_bytes.spv.inc"
};
const uint32_t kHalf[] = {
#include "half.spv.inc"
};
// As glslc wrote it.
std::span<const uint32_t> glslc_spirv(Kernel k) {
  switch (k) {
    case Kernel::pointwise: return kPointwise;
    case Kernel::reduce: return kReduce;
    case Kernel::softmax: return kSoftmax;
    case Kernel::matmul: return kMatmul;
    case Kernel::movement: return kMovement;
    case Kernel::index: return kIndex;
    case Kernel::sequence: return kSequence;
    case Kernel::conv: return kConv;
    case Kernel::pool: return kPool;
    case Kernel::fused: return kFused;
    case Kernel::rows: return kRows;
    case Kernel::attention: return kAttention;
    case Kernel::workload: return kWorkload;
    case Kernel::rows_subgroup: return kRowsSubgroup;
    case Kernel::reduce_subgroup: return kReduceSubgroup;
    case Kernel::attention_rows: return kAttentionRows;
    case Kernel::matmul_fused: return kMatmulFused;
    case Kernel::matmul_reference: return kMatmulReference;
    case Kernel::kv_cache: return kKvCache;
    case Kernel::top_k: return kTopK;
    case Kernel::matmul_q: return kMatmulQ;
    case Kernel::matmul_q_gemm: return kMatmulQGemm;
    case Kernel::matmul_q_bytes: return kMatmulQBytes;
    case Kernel::matmul_q_gemm_bytes: return kMatmulQGemmBytes;
    case Kernel::half: return kHalf;
    case Kernel::count_: break;
  }
  return {};
}

}  // namespace

const char* kernel_name(Kernel k) {
  static const char* names[] = {"pointwise",
                                "reduce",
                                "softmax",
                                "matmul",
                                "movement",
                                "index",
                                "sequence",
                                "conv",
                                "pool",
                                "fused",
                                "rows",
                                "attention",
                                "workload",
                                "rows_subgroup",
                                "reduce_subgroup",
                                "attention_rows",
                                "matmul_fused",
                                "matmul_reference",
                                "kv_cache",
                                "top_k",
                                "matmul_q",
                                "matmul_q_gemm",
                                "matmul_q_bytes",
                                "matmul_q_gemm_bytes",
                                "half"};
  static_assert(sizeof(names) / sizeof(names[0]) == kKernelCount);
  return names[size_t(k)];
}

std::vector<uint32_t> with_aliased_buffers(std::span<const uint32_t> words) {
  constexpr uint32_t kHeaderWords = 5, kOpVariable = 59, kOpDecorate = 71, kStorageBuffer = 12, kUniform = 2,
                     kAliased = 20, kRestrict = 19;
  auto fail = [](const char* why) { throw std::invalid_argument(std::string("[vulkan] SPIR-V: ") + why); };
  if (words.size() < kHeaderWords) fail("shorter than its header");
  std::vector<uint32_t> buffers, decorated;
  size_t first_decoration = 0;
  for (size_t at = kHeaderWords; at < words.size();) {
    const uint32_t op = words[at] & 0xffffu, count = words[at] >> 16;
    if (count == 0 || at + count > words.size()) fail("an instruction runs past the end");
    if (op == kOpDecorate && count >= 3) {
      if (!first_decoration) first_decoration = at;
      if (words[at + 2] == kAliased || words[at + 2] == kRestrict) decorated.push_back(words[at + 1]);
    }
    // Storage buffers (and, in SPIR-V before 1.3, Uniform blocks; decorating a uniform block
    // Aliased is harmless).
    if (op == kOpVariable && count >= 4 && (words[at + 3] == kStorageBuffer || words[at + 3] == kUniform))
      buffers.push_back(words[at + 2]);
    at += count;
  }
  if (!buffers.empty() && !first_decoration) fail("buffers without decorations");
  std::vector<uint32_t> out(words.begin(), words.begin() + long(first_decoration ? first_decoration : words.size()));
  for (uint32_t id : buffers) {
    if (std::find(decorated.begin(), decorated.end(), id) != decorated.end()) continue;
    out.insert(out.end(), {(3u << 16) | kOpDecorate, id, kAliased});
  }
  if (first_decoration) out.insert(out.end(), words.begin() + long(first_decoration), words.end());
  return out;
}

std::span<const uint32_t> kernel_spirv(Kernel k) {
  static const std::array<std::vector<uint32_t>, kKernelCount> modules = [] {
    std::array<std::vector<uint32_t>, kKernelCount> m;
    for (size_t i = 0; i < kKernelCount; ++i) m[i] = with_aliased_buffers(glslc_spirv(Kernel(i)));
    return m;
  }();
  return modules[size_t(k)];
}

}  // namespace meganeura::vk
