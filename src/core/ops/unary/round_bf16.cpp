// round_bf16: x rounded to the nearest bfloat16 value (8 significant bits, f32's exponent range;
// ties to even, infinity past 3.3895e38), kept in f32: an operand of the accelerated-bf16
// precision contract (apply_precision).
#include <bit>

#include "ops/op_def.h"
#include "ops/unary/rounding.h"

namespace meganeura::ops {

// bf16 is the upper half of f32: round the lower 16 bits away, to nearest even (a carry moves
// into the exponent as it should, up to infinity); NaN keeps x.
template <>
void unary_span<RoundTo<BFloat16>, float>(float, float, const float* x, float* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t u = std::bit_cast<uint32_t>(x[j]);
    const float r = std::bit_cast<float>((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
    y[j] = x[j] != x[j] ? x[j] : r;
  }
}

}  // namespace meganeura::ops

MEGANEURA_UNARY_OP(round_bf16, RoundTo<BFloat16>, .grad = GradKind::fused, .flops = 4,
                   .glsl = MEGANEURA_ROUND_TO_FORMAT_GLSL(7, -126, 3.3895313892515355e38), .transcendental = false)
