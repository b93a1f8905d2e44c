// Row-major GEMM for the CPU kernels: C[m,n] = alpha * op(A)[m,k] op(B)[k,n] + beta * C.
// f32 runs on oneDNN's sgemm (the library that also supplies the convolution primitives,
// onednn_conv.h; README's benchmark compares it with OpenBLAS's sgemm); f64, the oracle the
// f32 results are checked against, stays on OpenBLAS's dgemm so that the two never share a
// kernel.
#pragma once

#include <cstdint>

namespace meganeura::cpu {

enum class F32Gemm { onednn, openblas };
// Which library runs the f32 GEMMs (process-wide; oneDNN unless changed). The OpenBLAS choice
// exists for benchmarks and cross-checks; it also keeps f32 convolutions on im2col + GEMM.
void set_f32_gemm(F32Gemm lib);
F32Gemm f32_gemm();

// Large GEMMs are split into row (or column) blocks over the backend's pool, each block on a
// single-threaded library call: the libraries' own threads would oversubscribe the pool's.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// The same on the calling thread only (for callers that already run inside parallel_for).
void gemm_serial(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_serial(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                 const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace meganeura::cpu
