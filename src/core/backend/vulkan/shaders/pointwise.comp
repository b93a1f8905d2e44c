#version 450
// Unary and binary elementwise ops with broadcasting; the op is a push constant so that one
// pipeline serves the whole family (fewer pipelines, faster cold start). Values travel as raw
// 32-bit words so the same kernel casts between f32 and i32.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer B { uint b[]; };
layout(std430, binding = 2) writeonly buffer Y { uint y[]; };

#include "ops.glsl"

layout(push_constant) uniform P {
  uint n, op, binary, rank, contiguous;
  float p0, p1;
  uint shape[6];
  uint sa[6];
  uint sb[6];
} pc;

void main() {
  uint i = flat_index();
  if (i >= pc.n) return;
  if (pc.binary == 0) {
    uint w = a[i];
    if (pc.op == OP_F32_TO_I32) y[i] = uint(int(trunc(uintBitsToFloat(w))));
    else if (pc.op == OP_I32_TO_F32) y[i] = floatBitsToUint(float(int(w)));
    else y[i] = floatBitsToUint(unary_op(pc.op, uintBitsToFloat(w), pc.p0, pc.p1));
    return;
  }
  uint ia = i, ib = i;
  if (pc.contiguous == 0) {
    ia = 0;
    ib = 0;
    uint rem = i;
    for (int k = int(pc.rank) - 1; k >= 0; --k) {
      uint idx = rem % pc.shape[k];
      rem /= pc.shape[k];
      ia += idx * pc.sa[k];
      ib += idx * pc.sb[k];
    }
  }
  y[i] = floatBitsToUint(binary_op(pc.op, uintBitsToFloat(a[ia]), uintBitsToFloat(b[ib])));
}
