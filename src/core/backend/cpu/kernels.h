// CPU reference kernels, templated on the float type (float for strict f32, double for the
// oracle). Each family entry point handles every op of its family; the backend routes by
// op_info(op).family and the op table guarantees nothing is left unrouted.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "graph/op_table.h"
#include "meganeura/program.h"
#include "meganeura/schedule.h"

namespace meganeura::cpu {

struct Arg {
  void* data = nullptr;
  const ProgramTensor* t = nullptr;
  template <class T> T* as() const { return static_cast<T*>(data); }
  const Shape& shape() const { return t->type.shape; }
  int64_t n() const { return t->type.numel(); }
};

template <class T> void unary(const Dispatch& d, const std::vector<Arg>& in, const Arg& out);
template <class T> void binary(const Dispatch& d, const std::vector<Arg>& in, const Arg& out);
template <class T> void reduce(const Dispatch& d, const std::vector<Arg>& in, const Arg& out);
template <class T> void linalg(const Dispatch& d, const std::vector<Arg>& in, const Arg& out);
template <class T> void conv(const Dispatch& d, const std::vector<Arg>& in, const Arg& out);
template <class T> void pool(const Dispatch& d, const std::vector<Arg>& in, const Arg& out);
template <class T> void movement(const Dispatch& d, const std::vector<Arg>& in, const Arg& out);
template <class T> void index(const Dispatch& d, const std::vector<Arg>& in, const Arg& out);
template <class T> void sequence(const Dispatch& d, const std::vector<Arg>& in, const Arg& out);
// where, gather, gather_backward and the fused cross-entropy (workload_ops.cpp).
template <class T> void workload_index(const Dispatch& d, const std::vector<Arg>& in, const Arg& out);
// Query-tiled attention and its backward (attention_ops.cpp).
template <class T> void attention_tiled(const Dispatch& d, const std::vector<Arg>& in, const Arg& out);
void cast(const Dispatch& d, const std::vector<Arg>& in, const Arg& out);
// The fused ops: sizes from the launch's push constants, scratch from `workspace`; `outs` are
// the dispatch's writes (several for a multi-output fused_elementwise).
template <class T>
void fused(const Dispatch& d, const KernelLaunch& launch, const std::vector<Arg>& in, const std::vector<Arg>& outs,
           std::byte* workspace);
template <class T> void matmul(const MatmulAttrs& a, const Arg& x, const Arg& y, const Arg& out);

// The scratch the schedule planned for the dispatch being run (set by the backend around each
// dispatch); kernels take their temporary buffers from it instead of allocating.
void set_workspace(std::byte* data, size_t bytes);
std::byte* workspace(Op op, size_t bytes);

// Element strides of a row-major shape; broadcast dimensions of `in` against `out` get 0.
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out);

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
