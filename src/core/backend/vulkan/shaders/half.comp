#version 450
// round_f16 and round_bf16 into 16-bit storage (half.glsl): an invocation rounds two values and
// writes them as one word; an odd count's last word has zero in its high half.
#include "common.glsl"
#include "half.glsl"

layout(constant_id = 1) const uint FORMAT = HALF_F16;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { uint y[]; };

layout(push_constant) uniform P { uint n; } pc;

uint bits(float v) { return FORMAT == HALF_F16 ? f16_bits(v) : bf16_bits(v); }

void main() {
  const uint j = flat_index(), i = 2 * j;
  if (i >= pc.n) return;
  const uint hi = i + 1 < pc.n ? bits(x[i + 1]) : 0u;
  y[j] = bits(x[i]) | (hi << 16);
}
