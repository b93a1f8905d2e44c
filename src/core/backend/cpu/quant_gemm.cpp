// Block-format products: see quant_gemm.h. A Q8_0 block is an f16 scale and 32 signed bytes;
// a Q4_0 block an f16 scale and 16 bytes whose low nibbles are entries 0-15 and high nibbles
// 16-31, each value (nibble - 8) * scale.
#include "backend/cpu/quant_gemm.h"

#include <cpuid.h>
#include <immintrin.h>

// GCC 12 warns about the undefined vectors inside its own AVX-512 intrinsics' headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"

namespace meganeura::cpu {
namespace {

constexpr int64_t kBlock = 32;

// Element i of a row of f16 or bf16 values.
float half_value(DType type, const std::byte* w, int64_t i) {
  uint16_t h;
  std::memcpy(&h, w + 2 * i, 2);
  if (type == DType::f16) return half_to_float(h);
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float scale_of(const std::byte* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return half_to_float(h);
}

template <class T>
void decode(DType type, const std::byte* w, T* out, int64_t k) {
  if (type == DType::f16 || type == DType::bf16) {
    for (int64_t i = 0; i < k; ++i) out[i] = T(half_value(type, w, i));
    return;
  }
  const int64_t bytes = dtype_block(type).bytes;
  for (int64_t b = 0; b < k / kBlock; ++b, w += bytes, out += kBlock) {
    const T d = T(scale_of(w));
    const auto* q = reinterpret_cast<const uint8_t*>(w + 2);
    if (type == DType::q8_0) {
      for (int64_t i = 0; i < kBlock; ++i) out[i] = d * T(int8_t(q[i]));
    } else {
      for (int64_t i = 0; i < 16; ++i) out[i] = d * T(int(q[i] & 15) - 8), out[i + 16] = d * T(int(q[i] >> 4) - 8);
    }
  }
}

float dot_scalar(DType type, const std::byte* w, const float* x, int64_t k) {
  if (type == DType::f16 || type == DType::bf16) {
    float acc = 0;
    for (int64_t i = 0; i < k; ++i) acc += half_value(type, w, i) * x[i];
    return acc;
  }
  const int64_t bytes = dtype_block(type).bytes;
  float acc = 0;
  for (int64_t b = 0; b < k / kBlock; ++b, w += bytes, x += kBlock) {
    const auto* q = reinterpret_cast<const uint8_t*>(w + 2);
    float s = 0;
    if (type == DType::q8_0) {
      for (int64_t i = 0; i < kBlock; ++i) s += float(int8_t(q[i])) * x[i];
    } else {
      for (int64_t i = 0; i < 16; ++i) s += float(int(q[i] & 15) - 8) * x[i] + float(int(q[i] >> 4) - 8) * x[i + 16];
    }
    acc += scale_of(w) * s;
  }
  return acc;
}

#define MEGANEURA_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MEGANEURA_AVX512 __attribute__((target("avx512f,avx512bw,fma,f16c")))

MEGANEURA_AVX2 float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

MEGANEURA_AVX2 __m256 bytes_to_ps(__m128i eight_bytes, bool is_signed) {
  return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(eight_bytes) : _mm256_cvtepu8_epi32(eight_bytes));
}

// Eight f16 or bf16 values as floats.
MEGANEURA_AVX2 __m256 half8(DType type, const std::byte* w) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  if (type == DType::f16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// A row of k f16 or bf16 values as floats, eight at a time.
MEGANEURA_AVX2 void widen_avx2(DType type, const std::byte* w, float* out, int64_t k) {
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) _mm256_storeu_ps(out + i, half8(type, w + 2 * i));
  for (; i < k; ++i) out[i] = half_value(type, w, i);
}

MEGANEURA_AVX2 float dot_avx2(DType type, const std::byte* w, const float* x, int64_t k) {
  if (type == DType::f16 || type == DType::bf16) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) acc = _mm256_fmadd_ps(half8(type, w + 2 * i), _mm256_loadu_ps(x + i), acc);
    float s = hsum(acc);
    for (; i < k; ++i) s += half_value(type, w, i) * x[i];
    return s;
  }
  const int64_t bytes = dtype_block(type).bytes;
  __m256 acc = _mm256_setzero_ps();
  const __m256 eight = _mm256_set1_ps(8), fifteen = _mm256_castsi256_ps(_mm256_set1_epi32(15));
  for (int64_t b = 0; b < k / kBlock; ++b, w += bytes, x += kBlock) {
    uint16_t h;
    std::memcpy(&h, w, 2);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(h));
    __m256 s;
    if (type == DType::q8_0) {
      s = _mm256_mul_ps(bytes_to_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 2)), true),
                        _mm256_loadu_ps(x));
      for (int i = 1; i < 4; ++i) {
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 2 + 8 * i));
        s = _mm256_fmadd_ps(bytes_to_ps(q, true), _mm256_loadu_ps(x + 8 * i), s);
      }
    } else {
      s = _mm256_setzero_ps();
      for (int i = 0; i < 2; ++i) {
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 2 + 8 * i)));
        const __m256 lo = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_castps_si256(fifteen))), eight);
        const __m256 hi = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)), eight);
        s = _mm256_fmadd_ps(lo, _mm256_loadu_ps(x + 8 * i), s);
        s = _mm256_fmadd_ps(hi, _mm256_loadu_ps(x + 16 + 8 * i), s);
      }
    }
    acc = _mm256_fmadd_ps(d, s, acc);
  }
  return hsum(acc);
}

MEGANEURA_AVX512 __m512 half16(DType type, const std::byte* w) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  if (type == DType::f16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

MEGANEURA_AVX512 float dot_avx512(DType type, const std::byte* w, const float* x, int64_t k) {
  if (type == DType::f16 || type == DType::bf16) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) acc = _mm512_fmadd_ps(half16(type, w + 2 * i), _mm512_loadu_ps(x + i), acc);
    float s = _mm512_reduce_add_ps(acc);
    for (; i < k; ++i) s += half_value(type, w, i) * x[i];
    return s;
  }
  const int64_t bytes = dtype_block(type).bytes;
  __m512 acc = _mm512_setzero_ps();
  // A Q4_0 nibble's value, nibble - 8, looked up in a 16-entry table: the permute reads only the
  // low 4 bits of each index, so no mask, conversion or subtraction (exactly the same floats).
  const __m512 values = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t b = 0; b < k / kBlock; ++b, w += bytes, x += kBlock) {
    uint16_t h;
    std::memcpy(&h, w, 2);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(h));
    __m512 s;
    if (type == DType::q8_0) {
      const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2));
      const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18));
      s = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), _mm512_loadu_ps(x));
      s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), _mm512_loadu_ps(x + 16), s);
    } else {
      const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)));
      const __m512 lo = _mm512_permutexvar_ps(v, values);
      const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), values);
      s = _mm512_mul_ps(lo, _mm512_loadu_ps(x));
      s = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 16), s);
    }
    acc = _mm512_fmadd_ps(d, s, acc);
  }
  return _mm512_reduce_add_ps(acc);
}

using DotFn = float (*)(DType, const std::byte*, const float*, int64_t);
DotFn dot_for(QuantIsa isa) {
  return isa == QuantIsa::avx512 ? dot_avx512 : isa == QuantIsa::avx2 ? dot_avx2 : dot_scalar;
}

std::atomic<int> g_forced{-1};

// Rows of x at most this many take dot products; more go through decoded panels and the GEMM.
constexpr int64_t kDotRows = 4;
constexpr int64_t kPanelRows = 64;
constexpr int64_t kPanelBytes = int64_t(4) << 20;

}  // namespace

void decode_row(DType type, const std::byte* w, float* out, int64_t k) {
  if ((type == DType::f16 || type == DType::bf16) && quant_isa() != QuantIsa::scalar)
    return widen_avx2(type, w, out, k);
  decode(type, w, out, k);
}
void decode_row(DType type, const std::byte* w, double* out, int64_t k) { decode(type, w, out, k); }

QuantIsa quant_isa_supported() {
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (not every compiler's __builtin_cpu_supports knows it).
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return QuantIsa::avx512;
  return avx2 ? QuantIsa::avx2 : QuantIsa::scalar;
}

void force_quant_isa(std::optional<QuantIsa> isa) {
  if (isa && int(*isa) > int(quant_isa_supported()))
    throw std::invalid_argument(std::string("[cpu] this CPU cannot run the ") + quant_isa_name(*isa) + " path");
  g_forced = isa ? int(*isa) : -1;
}

QuantIsa quant_isa() {
  static const QuantIsa best = quant_isa_supported();
  const int forced = g_forced.load();
  return forced < 0 ? best : QuantIsa(forced);
}

const char* quant_isa_name(QuantIsa isa) {
  return isa == QuantIsa::avx512 ? "avx512" : isa == QuantIsa::avx2 ? "avx2" : "scalar";
}

void matmul_q(DType type, const float* x, const std::byte* w, float* y, int64_t m, int64_t n, int64_t k) {
  const uint64_t row_bytes = storage_bytes(type, k);
  if (m <= kDotRows) {
    const DotFn dot = dot_for(quant_isa());
    parallel_for(n, 64, [&](int64_t n0, int64_t n1) {
      for (int64_t j = n0; j < n1; ++j)
        for (int64_t i = 0; i < m; ++i) y[i * n + j] = dot(type, w + j * row_bytes, x + i * k, k);
    });
    return;
  }
  // A panel per thread where that fits kPanelBytes (the GEMM is faster on wider panels: oneDNN,
  // m = 128, k = 576, one Zen 4 core: 92 GFLOP/s on 64 rows, 107 on 256), else 64 rows.
  const int64_t threads = thread_count();
  int64_t panel_rows = std::max<int64_t>(kPanelRows, ((n + threads - 1) / threads + 15) / 16 * 16);
  if (panel_rows * k * int64_t(sizeof(float)) > kPanelBytes) panel_rows = kPanelRows;
  const int64_t panels = (n + panel_rows - 1) / panel_rows;
  parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
    // Uninitialised: every row the GEMM reads is decoded first (zeroing up to kPanelBytes per
    // call would be a second pass over the panel).
    const auto panel = std::make_unique_for_overwrite<float[]>(size_t(panel_rows * k));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t j0 = p * panel_rows, rows = std::min(panel_rows, n - j0);
      for (int64_t r = 0; r < rows; ++r) decode_row(type, w + (j0 + r) * row_bytes, panel.get() + r * k, k);
      gemm_serial(false, true, m, rows, k, 1.0f, x, k, panel.get(), k, 0.0f, y + j0, n);
    }
  });
}

void matmul_q(DType type, const double* x, const std::byte* w, double* y, int64_t m, int64_t n, int64_t k) {
  const uint64_t row_bytes = storage_bytes(type, k);
  parallel_for(n, 16, [&](int64_t n0, int64_t n1) {
    std::vector<double> row(static_cast<size_t>(k));
    for (int64_t j = n0; j < n1; ++j) {
      decode_row(type, w + j * row_bytes, row.data(), k);
      for (int64_t i = 0; i < m; ++i) {
        double s = 0;
        for (int64_t c = 0; c < k; ++c) s += x[i * k + c] * row[size_t(c)];
        y[i * n + j] = s;
      }
    }
  });
}

}  // namespace meganeura::cpu
