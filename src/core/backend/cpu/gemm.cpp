#include "backend/cpu/gemm.h"

#include <cblas.h>
#if MEGANEURA_ONEDNN
#include <oneapi/dnnl/dnnl.h>

#include "backend/cpu/openmp.h"
#endif

#include <atomic>
#include <stdexcept>
#include <string>

#include "backend/cpu/parallel.h"

namespace meganeura::cpu {
namespace {

#if MEGANEURA_ONEDNN
std::atomic<F32Gemm> g_f32_gemm{F32Gemm::onednn};
#else
std::atomic<F32Gemm> g_f32_gemm{F32Gemm::openblas};
#endif

// OpenBLAS's threads spin in sched_yield between calls (they took 44% of a transformer step's
// samples while our elementwise loops ran): it runs single-threaded, once, process-wide.
void openblas_single() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

}  // namespace

void set_f32_gemm(F32Gemm lib) {
#if !MEGANEURA_ONEDNN
  if (lib == F32Gemm::onednn)
    throw std::runtime_error("[matmul] oneDNN requested but this build has none (MEGANEURA_ONEDNN=OFF)");
#endif
  g_f32_gemm = lib;
}
F32Gemm f32_gemm() { return g_f32_gemm; }

void gemm_serial(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (g_f32_gemm == F32Gemm::openblas) {
    openblas_single();
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
                alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
    return;
  }
#if MEGANEURA_ONEDNN
  // oneDNN (built on OpenMP) parallelises over omp_get_max_threads(), a per-thread setting:
  // one thread here, since the pool already provides the parallelism.
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  if (k == 0) {  // oneDNN rejects leading dimensions of 0: C = beta * C by hand
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
  const dnnl_status_t s = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (s != dnnl_success) {
    throw std::runtime_error("[matmul] oneDNN sgemm failed (status " + std::to_string(int(s)) + ") for " +
                             std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
  }
#endif
}

void gemm_serial(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                 const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  openblas_single();
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

namespace {

template <class T>
void split_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
                int64_t ldb, T beta, T* c, int64_t ldc) {
  // Threads pay off above 2M multiply-adds, or where B alone is large: a product with a few rows
  // (a decode step's matrix-vector products) is bound by reading B, which threads share.
  // Each thread packs all of the operand that is not split, so the split goes along the larger
  // of m and n: a prompt chunk's projections (m = 128 rows against weights of 576-1536 columns)
  // split by rows packed every weight on both threads (oneDNN, 2-core Zen 4: 121 GFLOP/s over a
  // SmolLM2 layer's seven products, 150 split by columns).
  const int64_t min_work = int64_t(1) << 21, min_b = int64_t(1) << 17;
  if ((m * n * k < min_work && n * k < min_b) || thread_count() == 1) {
    gemm_serial(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else if (m >= 4 * thread_count() && m >= n) {
    parallel_for(m, 1, [&](int64_t i0, int64_t i1) {
      gemm_serial(ta, tb, i1 - i0, n, k, alpha, ta ? a + i0 : a + i0 * lda, lda, b, ldb, beta, c + i0 * ldc, ldc);
    });
  } else {
    parallel_for(n, 1, [&](int64_t j0, int64_t j1) {
      gemm_serial(ta, tb, m, j1 - j0, k, alpha, a, lda, tb ? b + j0 * ldb : b + j0, ldb, beta, c + j0, ldc);
    });
  }
}

}  // namespace

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  split_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  split_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace meganeura::cpu
