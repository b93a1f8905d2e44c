// Kernels (one compute shader per family, embedded as SPIR-V at build time), their pipelines
// keyed by kernel and specialisation constants, and the on-disk pipeline cache.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "backend/vulkan/context.h"

namespace meganeura::vk {

enum class Kernel : uint8_t {
  pointwise,
  reduce,
  softmax,
  matmul,
  movement,
  index,
  sequence,
  conv,
  pool,
  fused,
  rows,
  attention,
  workload,
  rows_subgroup,  // rows and reduce compiled with subgroup arithmetic, for devices that have it
  reduce_subgroup,
  attention_rows,    // attention for CPU-emulated devices: a row per invocation, no shared tiles
  matmul_fused,      // matmul with its epilogue program (wide layout)
  matmul_reference,  // the first GEMM kernel, for comparisons
  kv_cache,          // the key/value cache ops (wide layout: up to four inputs)
  top_k,             // a row's k largest entries (wide layout, as the workload kernels)
  matmul_q,          // products with block-format weights (wide layout)
  matmul_q_gemm,     // the same on the GEMM core, for prompt chunks
  matmul_q_bytes,    // matmul_q and matmul_q_gemm reading the blocks through 8-bit storage
  matmul_q_gemm_bytes,
  half,  // round_f16 and round_bf16 writing 16-bit storage (two values a word)
  count_
};
constexpr size_t kKernelCount = size_t(Kernel::count_);
const char* kernel_name(Kernel k);
// A kernel's SPIR-V. Its storage buffers are decorated Aliased: the lowering binds one buffer
// to several bindings (an output written in place over an input, unused slots repeating an
// input), which SPIR-V leaves undefined unless the declarations are Aliased, and glslang
// writes no such decoration for GLSL buffers (which GLSL lets alias unless `restrict`).
std::span<const uint32_t> kernel_spirv(Kernel k);
// `words` with every storage buffer variable not already decorated Aliased or Restrict
// decorated Aliased; throws std::invalid_argument for a malformed module.
std::vector<uint32_t> with_aliased_buffers(std::span<const uint32_t> words);

// Two pipeline layouts, both with a 128-byte push block: kBindings storage buffers for the
// primitive kernels, kWideBindings for the fused ones (eight inputs, the output, binding 9
// unused, the secondary outputs of a multi-output program), attention and the workload kernels (up to five
// inputs or a workspace, the output at binding 8).
constexpr uint32_t kBindings = 3;
constexpr uint32_t kWideBindings = 12;
inline bool wide(Kernel k) {
  return k == Kernel::fused || k == Kernel::rows || k == Kernel::rows_subgroup || k == Kernel::attention ||
         k == Kernel::attention_rows || k == Kernel::workload || k == Kernel::matmul_fused || k == Kernel::kv_cache ||
         k == Kernel::top_k || k == Kernel::matmul_q || k == Kernel::matmul_q_bytes;
}
inline uint32_t binding_count(Kernel k) { return wide(k) ? kWideBindings : kBindings; }
// A fused program's kernels (fused, matmul_fused) carry the program in their key: the
// specialisation constants from kProgramSpecBase on are the program (program_kernel.h), which
// the kernel is compiled with; the constants before it are the kernel's own.
constexpr uint32_t kProgramSpecBase = 16;
inline bool runs_program(Kernel k) { return k == Kernel::fused || k == Kernel::matmul_fused; }
constexpr uint32_t kPushBytes = 128;

// A persisted VkPipelineCache. The file holds our header (magic, payload size, FNV-1a of the
// payload) and the driver's blob, whose own header must name this device; anything else --
// missing, truncated, corrupt, another device or driver -- is a miss and starts empty.
class PipelineCache {
 public:
  PipelineCache(const Device& d, std::string dir);  // dir "": no persistence
  ~PipelineCache();
  PipelineCache(const PipelineCache&) = delete;
  PipelineCache& operator=(const PipelineCache&) = delete;
  VkPipelineCache handle() const { return cache_; }
  // "loaded", "missing", "stale" or "corrupt": what happened to the file on creation.
  const std::string& load_status() const { return status_; }
  const std::string& path() const { return path_; }
  void save();

 private:
  const Device& d_;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::string path_, status_ = "disabled";
};

std::string default_cache_dir();  // $XDG_CACHE_HOME/meganeura or ~/.cache/meganeura ("" if neither)

class Pipelines {
 public:
  // wide_layout: create the wide layout (the device allows kWideBindings per stage).
  Pipelines(const Device& d, PipelineCache* cache, bool wide_layout);
  ~Pipelines();
  Pipelines(const Pipelines&) = delete;
  Pipelines& operator=(const Pipelines&) = delete;
  using Key = std::pair<Kernel, std::vector<uint32_t>>;
  VkPipeline get(Kernel k, const std::vector<uint32_t>& spec);
  // Creates the pipelines among keys that do not exist yet, on up to `threads` threads at once
  // (a driver compiles each pipeline on the calling thread; lavapipe's LLVM takes most of a
  // cold session build there). The first failure is thrown after all threads have finished.
  void create(const std::vector<Key>& keys, unsigned threads);
  VkPipelineLayout layout(Kernel k) const { return layout_[wide(k)]; }
  VkDescriptorSetLayout set_layout(Kernel k) const { return set_layout_[wide(k)]; }
  size_t created() const { return pipelines_.size(); }

 private:
  void prepare(Kernel k);  // checks k's layout and creates its shader module
  // Thread-safe; a fused program's kernel is compiled first (its failure thrown).
  VkResult build(const Key& key, VkPipeline* out) const;

  const Device& d_;
  PipelineCache* cache_;
  VkDescriptorSetLayout set_layout_[2] = {};
  VkPipelineLayout layout_[2] = {};
  VkShaderModule modules_[kKernelCount] = {};
  std::map<Key, VkPipeline> pipelines_;
};

}  // namespace meganeura::vk
