// CPU reference kernels, templated on the float type (float for strict f32, double for the
// oracle). The backend runs each op with the kernel routine its declaration names
// (OpInfo::cpu, ops/op_def.h); each routine handles every op that names it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "graph/op_table.h"
#include "meganeura/program.h"
#include "schedule/schedule.h"

namespace meganeura::cpu {

// A kernel operand: its memory and stored dtype. No shape: every size a kernel uses comes from
// its launch's push block (schedule.h), lowered once per program.
struct Arg {
  void* data = nullptr;
  DType stored = DType::f32;
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Whether the kernel of `d` reads its input `input` in 16 bits itself (an embedding's table, the
// weight of a product y = x w^T through the block-format path) rather than widened to f32.
bool reads_16bit(const Dispatch& d, const KernelLaunch& l, size_t input);

// An IEEE half's value.
float half_to_float(uint16_t h);

// Family entry points; `l` is the dispatch's launch from the program's schedule.
template <class T>
void unary(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out);
template <class T>
void binary(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out);
template <class T>
void reduce(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out);
template <class T>
void linalg(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out);
template <class T>
void conv(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out);
template <class T>
void pool(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out);
template <class T>
void movement(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out);
template <class T>
void index(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out);
template <class T>
void sequence(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out);
// where, gather, gather_backward and the fused cross-entropy (workload_ops.cpp).
template <class T>
void workload_index(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out);
// The key/value cache ops: kv_cache_write, cached_attention, rope_at (kv_cache_ops.cpp).
template <class T>
void kv_cache(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out);
// Query-tiled attention and its backward (attention_ops.cpp).
template <class T>
void attention_tiled(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out);
void cast(const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out);
// The fused ops; `outs` are the dispatch's writes (several for a multi-output
// fused_elementwise).
template <class T>
void fused(const Dispatch& d, const KernelLaunch& launch, const std::vector<Arg>& in, const std::vector<Arg>& outs);
// matmul's GEMMs with the sizes of the launch's push::kMatmul words.
template <class T>
void matmul(const PushConstants& p, const Arg& x, const Arg& y, const Arg& out);
// Runs one dispatch with its launch: the backend's per-dispatch step, routed by op family.
// Kernels take their scratch from the workspace set with set_workspace().
template <class T>
void execute(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const std::vector<Arg>& outs);

// An ElementwiseLayout block decoded: the collapsed extents and, per input, the element stride
// of each dimension (0 where the input is broadcast).
struct Broadcast {
  static constexpr size_t kRank = ElementwiseLayout::kMaxDims;
  int64_t numel = 0, rank = 0, inputs = 0;
  int64_t ext[kRank] = {};
  int64_t stride[kFusedMaxInputs][kRank] = {};
  explicit Broadcast(const PushConstants& p);
  bool spans_all(int64_t input) const;  // the input is laid out like the output
};

// The scratch the schedule planned for the dispatch being run (set by the backend around each
// dispatch); kernels take their temporary buffers from it instead of allocating.
void set_workspace(std::byte* data, size_t bytes);
std::byte* workspace(Op op, size_t bytes);

[[noreturn]] inline void kernel_error(Op op, const std::string& msg) {
  throw std::runtime_error("[cpu:" + std::string(op_name(op)) + "] " + msg);
}

// Elementwise loops parallelise above this many elements.
constexpr int64_t kParallelMin = 1 << 15;

}  // namespace meganeura::cpu

namespace meganeura::cpu {
// Converts n values between storage dtypes (f16/bf16 round to nearest even).
void convert(DType from, const void* src, DType to, void* dst, int64_t n);
}  // namespace meganeura::cpu
