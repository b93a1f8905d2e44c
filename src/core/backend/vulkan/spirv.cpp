// The SPIR-V of every kernel, generated from shaders/*.comp by glslc at build time.
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
}  // namespace

const char* kernel_name(Kernel k) {
  static const char* names[] = {
      "pointwise", "reduce", "softmax", "matmul",    "movement", "index",         "sequence",        "conv",
      "pool",      "fused",  "rows",    "attention", "workload", "rows_subgroup", "reduce_subgroup", "attention_rows"};
  static_assert(sizeof(names) / sizeof(names[0]) == kKernelCount);
  return names[size_t(k)];
}

std::span<const uint32_t> kernel_spirv(Kernel k) {
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
    case Kernel::count_: break;
  }
  return {};
}

}  // namespace meganeura::vk
