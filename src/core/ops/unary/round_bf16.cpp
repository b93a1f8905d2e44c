// round_bf16: x rounded to the nearest bfloat16 value (8 significant bits, f32's exponent range;
// ties to even, infinity past 3.3895e38), kept in f32: an operand of the accelerated-bf16
// precision contract (apply_precision).
#include "ops/op_def.h"
#include "ops/unary/rounding.h"

MEGANEURA_UNARY_OP(round_bf16, RoundTo<BFloat16>, .grad = GradKind::fused, .flops = 4,
                   .glsl = MEGANEURA_ROUND_TO_FORMAT_GLSL(7, -126, 3.3895313892515355e38), .transcendental = false)
