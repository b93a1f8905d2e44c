// Shared by the lowering's files (lowering.cpp and the lower_*.cpp of the kernel families):
// push-block writing, grids, strides, and the loop-cost arithmetic every launch's planned
// loop_iterations is built from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/vulkan/lowering.h"
#include "graph/op_table.h"
#include "schedule/schedule.h"

namespace meganeura::vk::detail {

constexpr size_t kMaxRank = 6;

[[noreturn]] void unsupported(Op op, const std::string& why);

struct Push {
  Launch& l;
  void u(uint64_t v);
  void i(int64_t v);
  void f(double v);
  template <class T>
  void array(const std::vector<T>& v, bool is_signed = false) {
    for (size_t k = 0; k < kMaxRank; ++k) {
      int64_t x = k < v.size() ? int64_t(v[k]) : 0;
      if (is_signed)
        i(x);
      else
        u(uint64_t(x));
    }
  }
};

std::vector<int64_t> strides_of(const Shape& s);
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out);
// Merges adjacent axes that every operand walks contiguously, so high-rank views fit the
// kernels' fixed rank.
void collapse(Shape& shape, std::vector<std::vector<int64_t>*> strides);
void grid(Launch& l, uint64_t groups, const DeviceClass& dc);
void elementwise_grid(Launch& l, uint64_t n, const DeviceClass& dc);
uint32_t fbits(double v);

constexpr uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
constexpr uint32_t log2_ceil(uint64_t n) {
  uint32_t k = 0;
  while ((uint64_t(1) << k) < n) ++k;
  return k;
}

// Loop costs, as lavapipe counts them: a loop of n iterations takes n + 1 back-edges (its SIMD
// lanes leave together at the end of the pass that finds them all done), and nested loops add
// up. Loops the kernels mark [[unroll]] over compile-time trip counts are not loops once
// compiled and cost nothing (the long-sequence attention tests show it on lavapipe).
constexpr uint64_t loop(uint64_t trips) { return trips + 1; }
// `for (j = first; j < n; j += step)` with first < step: at most ceil(n / step) iterations.
constexpr uint64_t strided(uint64_t n, uint64_t step) { return loop(ceil_div(n, step)); }
// A loop of `trips` iterations whose body costs `body`.
constexpr uint64_t nest(uint64_t trips, uint64_t body) { return trips * (body + 1) + 1; }
// A workgroup tree over `wg` values (group.glsl and the kernels' own trees).
constexpr uint64_t tree(uint64_t wg) { return loop(log2_ceil(wg)); }

// What the family lowerings need from the lowering of a program.
struct Context {
  const Program& p;
  const DeviceClass& dc;
  const Shape& shape(uint32_t t) const { return p.tensors[t].type.shape; }
  uint64_t numel_of(uint32_t t) const { return uint64_t(p.tensors[t].type.numel()); }
};

// The schedule's push block and the dispatch's operands in the wide layout: inputs from
// binding 0, the output at 8, every other slot a valid (unused) binding.
void wide_operands(const Dispatch& d, const KernelLaunch& k, Launch& l, size_t max_inputs);

// The kernel families lowered outside lowering.cpp (lower_attention.cpp, lower_gradients.cpp,
// lower_rows.cpp). Each appends the dispatch's launches, loop_iterations planned.
void lower_attention(const Context& c, const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out);
// kv_cache_write, cached_attention and rope_at (lower_kv_cache.cpp).
void lower_kv_cache(const Context& c, const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out);
void lower_pool(const Context& c, const Dispatch& d, Launch l, std::vector<Launch>& out);
void lower_index(const Context& c, const Dispatch& d, Launch l, std::vector<Launch>& out);
void lower_workload(const Context& c, const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out);
// matmul_q on matmul_q.comp (lower_gradients.cpp).
void lower_matmul_q(const Context& c, const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out);
void lower_reduce(const Context& c, const Dispatch& d, Launch l, Launch soft, std::vector<Launch>& out);
void lower_rows(const Context& c, const Dispatch& d, const KernelLaunch& k, Launch rows, std::vector<Launch>& out);
void lower_fused_reduce(const Context& c, const Dispatch& d, const KernelLaunch& k, Launch l, std::vector<Launch>& out);
// The planned loop bound of a launch of the kernels lowered with their own push layouts
// (pointwise, movement, sequence, matmul, conv) and of fused elementwise programs, read from
// the launch's push words and specialisation as the shader reads them; Launch::kUnplanned for
// any other kernel (its lowering plans it).
uint64_t primitive_loop_bound(const Launch& l);
// Bytes of shared memory one workgroup of the launch declares, as its shader declares them
// (the specialisation sets the sizes).
uint64_t shared_memory_bytes(const Launch& l);
// Throws, naming the op, for a launch left unplanned, over the loop budget, or with a
// workgroup or shared memory beyond the device's limits.
void check_launch(const Dispatch& d, const Launch& l, const DeviceClass& dc);

// Loop back-edges of one evaluation of the launch's fused program (fused.comp's evaluate): the
// layout walk of each load of an input broadcast over some axis (the program itself is
// straight-line code, program_kernel.h).
uint64_t fused_program_cost(const Launch& l);
// The launch's fused program (`code`) in its pipeline key, after the kernel's own constants
// (from kProgramSpecBase): its length, then per instruction its word and the bits of a and b.
// Every program gets its own kernel, compiled with the program in it (program_kernel.h).
void specialise_program(const Dispatch& d, Launch& l);
// fused.comp's modes (push word kPushMode).
enum : uint32_t { kFusedElementwise, kFusedReduce, kFusedSerial, kFusedPartial, kFusedCombine, kFusedHalf, kFusedBf16 };
// Pieces a reduction of `len` elements per output splits into (1: none): enough that one
// invocation's share, `element` back-edges per element, fits the budget with the workgroup's
// tree, and, for few outputs, enough workgroups to occupy the device.
uint64_t reduction_chunks(uint64_t outputs, uint64_t len, uint32_t wg, uint64_t element, const DeviceClass& dc);

}  // namespace meganeura::vk::detail
