// The fused program of a matmul_epilogue (as fused.comp's: straight-line GLSL the backend
// compiles into the kernel, one kernel per program), evaluated on the results of the GEMM
// before they are stored: input 0 is the product,
// input k >= 1 is read through binding k + 1 (input 7: binding 10) at the schedule's broadcast
// offset of the result's flat index. Programs with several outputs are not fused here.
// Included by matmul.comp after gemm_params.glsl; push words 12-22 hold the schedule's
// elementwise layout.
#include "ops.glsl"

layout(std430, binding = 2) readonly buffer E1 { float v[]; } e1;
layout(std430, binding = 3) readonly buffer E2 { float v[]; } e2;
layout(std430, binding = 4) readonly buffer E3 { float v[]; } e3;
layout(std430, binding = 5) readonly buffer E4 { float v[]; } e4;
layout(std430, binding = 6) readonly buffer E5 { float v[]; } e5;
layout(std430, binding = 7) readonly buffer E6 { float v[]; } e6;
layout(std430, binding = 10) readonly buffer E7 { float v[]; } e7;

const uint RANK = 13, EXTENTS = 14, MASKS = 20;
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

float program_input(uint k, uint i) { return epilogue_input(k, offset_of(k, i)); }

#include "fused_program.glsl"

// Results first .. first + valid - 1 (a row's last quad may hold fewer than four), one at a
// time: one copy of the program in the kernel.
vec4 epilogue(uint first, uint valid, vec4 x) {
  [[dont_unroll]] for (uint c = 0; c < valid; ++c) x[c] = program(first + c, x[c]);
  return x;
}
