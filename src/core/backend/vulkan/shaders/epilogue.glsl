// The fused program of a matmul_epilogue (the encoding fused.comp interprets), evaluated on
// the results of the GEMM before they are stored: input 0 is the product,
// input k >= 1 is read through binding k + 1 (input 7: binding 10) at the schedule's broadcast
// offset of the result's flat index. Programs with several outputs are not fused here.
// Included by matmul.comp after gemm_params.glsl; push words 12-22 hold the schedule's
// elementwise layout, 25 and 26 the program's offset and length.
#include "ops.glsl"

layout(std430, binding = 2) readonly buffer E1 { float v[]; } e1;
layout(std430, binding = 3) readonly buffer E2 { float v[]; } e2;
layout(std430, binding = 4) readonly buffer E3 { float v[]; } e3;
layout(std430, binding = 5) readonly buffer E4 { float v[]; } e4;
layout(std430, binding = 6) readonly buffer E5 { float v[]; } e5;
layout(std430, binding = 7) readonly buffer E6 { float v[]; } e6;
layout(std430, binding = 10) readonly buffer E7 { float v[]; } e7;
layout(std430, binding = 9) readonly buffer Code { uvec4 code[]; };

const uint RANK = 13, EXTENTS = 14, MASKS = 20, CODE_OFFSET = 25, CODE_LENGTH = 26;
const uint K_INPUT = 0, K_CONSTANT = 1, K_UNARY = 2, K_BINARY = 3;
#include "broadcast.glsl"

float epilogue_input(uint k, uint i) {
  switch (k) {
    case 1: return e1.v[i];
    case 2: return e2.v[i];
    case 3: return e3.v[i];
    case 4: return e4.v[i];
    case 5: return e5.v[i];
    case 6: return e6.v[i];
  }
  return e7.v[i];
}

// Results first .. first + valid - 1 (a row's last quad may hold fewer than four), one at a
// time: one copy of the interpreter and of ops.glsl's switch in the kernel.
vec4 epilogue(uint first, uint valid, vec4 x) {
  const uint base = pc.w[CODE_OFFSET], n = pc.w[CODE_LENGTH];
  [[dont_unroll]] for (uint c = 0; c < valid; ++c) {
    float st[8];
    uint sp = 0;
    for (uint i = 0; i < n; ++i) {
      const uvec4 ins = code[base + i];
      const uint kind = ins.x & 0xffu, op = (ins.x >> 8) & 0xffu, k = ins.x >> 16;
      if (kind == K_INPUT) {
        st[sp++] = k == 0u ? x[c] : epilogue_input(k, offset_of(k, first + c));
      } else if (kind == K_CONSTANT) {
        st[sp++] = uintBitsToFloat(ins.y);
      } else if (kind == K_UNARY) {
        st[sp - 1u] = unary_op(op, st[sp - 1u], uintBitsToFloat(ins.y), uintBitsToFloat(ins.z));
      } else if (kind == K_BINARY) {
        st[sp - 2u] = binary_op(op, st[sp - 2u], st[sp - 1u]);
        --sp;
      }
    }
    x[c] = st[0];
  }
  return x;
}
