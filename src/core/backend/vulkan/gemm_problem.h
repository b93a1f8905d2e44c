// One GEMM as the kernels of shaders/gemm.glsl see it, and its emission as launches: tiles from
// the device class, K split across workgroups when the tiles alone would leave the device idle
// or an invocation would run past the loop budget (the partial products summed in a fixed
// order by a second launch), and the planned loop iterations of each launch. Shared by the
// matmul and convolution lowerings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/vulkan/lowering.h"

namespace meganeura::vk::gemm {

[[noreturn]] void refuse(Op op, const std::string& why);  // "[vulkan:op] why"
uint32_t u32(Op op, uint64_t v, const char* what);        // refuses what does not fit 32 bits
inline uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Push words every GEMM kernel shares (gemm_params.glsl); the others are the kernel's.
constexpr size_t kM = 0, kN = 1, kK = 2, kKChunk = 9, kSplits = 10, kBatches = 11, kWorkspaceBase = 30;
enum : uint32_t { kModeGemm = 0, kModeReduce = 1 };
// matmul.comp's: leading dimensions and the batches' element strides (0: shared).
constexpr size_t kLda = 3, kLdb = 4, kLdc = 5, kBatchA = 6, kBatchB = 7, kBatchC = 8;

// C[batch] (m x n) = op(A)[batch] (m x k) op(B)[batch] (k x n).
struct Problem {
  Kernel kernel = Kernel::matmul;  // matmul, matmul_fused or conv
  uint32_t operation = 0;          // conv.comp's pass
  uint64_t m = 0, n = 0, k = 0, batches = 1;
  bool a_along_k = true, b_along_n = true, vec_a = false, vec_b = false, vec_c = false;
  uint32_t words[32] = {};  // the kernel's own push words; the shared ones are set on emission
  uint64_t epilogue = 0;    // instructions of the fused program (0: none)
  // Operands stored in 16 bits (shaders/half.glsl): A's format in bits 0-1, B's in bits 2-3.
  uint32_t half = 0;
};
enum : uint32_t { kHalfF32 = 0, kHalfF16 = 1, kHalfBf16 = 2 };
// The format code of a tensor stored as `t` (kHalfF32 for f32).
uint32_t half_format(DType t);

// The GEMM launch and, when K is split, the reduction of its partial products, which go to the
// workspace from element `workspace` on. Returns the elements it used there (a multiple of 4).
uint64_t emit(const Problem& pr, const DeviceClass& dc, Op op, Launch base, std::vector<Launch>& out,
              uint64_t workspace = 0);

// x * y workgroups for `groups` (x up to the device's limit).
void flat_grid(Launch& l, uint64_t groups, const DeviceClass& dc, Op op);

}  // namespace meganeura::vk::gemm
