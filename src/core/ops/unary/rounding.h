// Rounding to a narrower floating-point format, to nearest with ties to even, kept in the wider
// type: the operands of the accelerated precision contracts (round_f16, round_bf16). Exact in
// float and double alike: frexp, ldexp and nearbyint (in the default rounding mode) never round.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ops/op_def.h"

namespace meganeura::ops {

// A format with `mantissa_bits` stored fraction bits, normal exponents down to `min_exponent`
// (below it, subnormals at that spacing) and largest finite value `max_finite`.
template <class T>
T round_to_format(T x, int mantissa_bits, int min_exponent, T max_finite) {
  if (!std::isfinite(x) || x == T(0)) return x;
  int e = 0;
  (void)std::frexp(x, &e);                                      // |x| = m 2^e, m in [0.5, 1)
  const int q = std::max(e - 1, min_exponent) - mantissa_bits;  // the format's spacing at x: 2^q
  const T r = std::ldexp(std::nearbyint(std::ldexp(x, -q)), q);
  return std::abs(r) > max_finite ? std::copysign(std::numeric_limits<T>::infinity(), x) : r;
}

// The two formats, and the op function of each (MEGANEURA_UNARY_OP's F).
struct Half {
  static constexpr int mantissa_bits = 10, min_exponent = -14;
  static constexpr double max_finite = 65504;
};
struct BFloat16 {
  static constexpr int mantissa_bits = 7, min_exponent = -126;
  static constexpr double max_finite = 3.38953138925153547590470800371487866880e38;
};
template <class Format>
struct RoundTo {
  template <class T>
  static T f(T x, T, T) {
    return round_to_format<T>(x, Format::mantissa_bits, Format::min_exponent, T(Format::max_finite));
  }
};

// The f32 spans, the CPU's loops: f16 through the F16C conversions where the CPU has them, bf16
// by rounding the f32 bits; the same bits as round_to_format (NaN passes through unchanged).
template <>
void unary_span<RoundTo<Half>, float>(float, float, const float* x, float* y, int64_t n);
template <>
void unary_span<RoundTo<BFloat16>, float>(float, float, const float* x, float* y, int64_t n);

// The same in GLSL (x is the op's operand); Vulkan's ldexp and roundEven are exact too.
#define MEGANEURA_ROUND_TO_FORMAT_GLSL(mantissa_bits, min_exponent, max_finite)                           \
  "if (isinf(x) || isnan(x) || x == 0.0) return x; int e; frexp(x, e); int q = max(e - 1, " #min_exponent \
  ") - " #mantissa_bits                                                                                   \
  "; float r = ldexp(roundEven(ldexp(x, -q)), q); "                                                       \
  "return abs(r) > " #max_finite " ? (x < 0.0 ? uintBitsToFloat(0xff800000u) : uintBitsToFloat(0x7f800000u)) : r;"

}  // namespace meganeura::ops
