// round_f16: x rounded to the nearest IEEE half-precision value (ties to even; subnormals below
// 2^-14, infinity past 65504), kept in f32: an operand of the accelerated precision contract
// (apply_precision), so every backend computes the contract's products from the same values.
#include "ops/op_def.h"
#include "ops/unary/rounding.h"

MEGANEURA_UNARY_OP(round_f16, RoundTo<Half>, .grad = GradKind::fused, .flops = 4,
                   .glsl = MEGANEURA_ROUND_TO_FORMAT_GLSL(10, -14, 65504.0), .transcendental = false)
