// round_f16: x rounded to the nearest IEEE half-precision value (ties to even; subnormals below
// 2^-14, infinity past 65504), kept in f32: an operand of the accelerated precision contract
// (apply_precision), so every backend computes the contract's products from the same values.
#include <cpuid.h>
#include <immintrin.h>

#include "ops/op_def.h"
#include "ops/unary/rounding.h"

namespace meganeura::ops {
namespace {

// Eight at a time through half precision and back (round to nearest even; NaN lanes keep x).
__attribute__((target("avx,f16c"))) void round_f16_f16c(const float* x, float* y, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    const __m256 r = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm256_storeu_ps(y + j, _mm256_blendv_ps(r, v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  }
  for (; j < n; ++j) y[j] = RoundTo<Half>::f<float>(x[j], 0.f, 0.f);
}

// CPUID leaf 1: F16C (ecx bit 29) with AVX (bit 28), and the OS saving YMM state (XGETBV).
bool has_f16c() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const unsigned want = (1u << 27) | (1u << 28) | (1u << 29);  // OSXSAVE, AVX, F16C
    if ((c & want) != want) return false;
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;
  }();
  return yes;
}

}  // namespace

template <>
void unary_span<RoundTo<Half>, float>(float, float, const float* x, float* y, int64_t n) {
  if (has_f16c()) return round_f16_f16c(x, y, n);
  for (int64_t j = 0; j < n; ++j) y[j] = RoundTo<Half>::f<float>(x[j], 0.f, 0.f);
}

}  // namespace meganeura::ops

MEGANEURA_UNARY_OP(round_f16, RoundTo<Half>, .grad = GradKind::fused, .flops = 4,
                   .glsl = MEGANEURA_ROUND_TO_FORMAT_GLSL(10, -14, 65504.0), .transcendental = false)
