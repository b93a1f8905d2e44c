// The GEMM kernels' specialisation constants, shared push words and helpers (gemm.glsl has
// the core). Included first, before the kernel's loaders.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(constant_id = 1) const uint MODE = 0;       // MODE_GEMM or MODE_REDUCE
layout(constant_id = 2) const uint OPERATION = 0;  // the kernel's own variant (convolution: which pass)
layout(constant_id = 3) const uint A_ALONG_K = 1;
layout(constant_id = 4) const uint B_ALONG_N = 1;
layout(constant_id = 5) const uint VEC_A = 0;  // A quads are aligned vec4 loads
layout(constant_id = 6) const uint VEC_B = 0;
layout(constant_id = 7) const uint VEC_C = 0;  // C quads are aligned vec4 stores
layout(constant_id = 8) const uint VEC_W = 0;  // N % 4 == 0: workspace quads are vec4s
layout(constant_id = 9) const uint BM = 64;
layout(constant_id = 10) const uint BN = 64;
layout(constant_id = 11) const uint BK = 16;  // shared-memory path: K per slice
layout(constant_id = 12) const uint TM = 8;   // rows per invocation (a multiple of 4)
layout(constant_id = 13) const uint TN = 4;   // columns per invocation (a multiple of 4)
layout(constant_id = 14) const uint PATH = 0;  // PATH_SHARED or PATH_DIRECT
// Operands stored in 16 bits (half.glsl): bits 0-1 A's format, bits 2-3 B's, bits 4-5 the
// result's (an epilogue ending in a rounding; HALF_F32: f32).
layout(constant_id = 15) const uint HALF = 0;
#include "half.glsl"
const uint A_FORMAT = HALF & 3u, B_FORMAT = (HALF >> 2) & 3u, C_FORMAT = (HALF >> 4) & 3u;

const uint MODE_GEMM = 0, MODE_REDUCE = 1, PATH_SHARED = 0, PATH_DIRECT = 1;
// Push words every GEMM kernel shares; the others are the kernel's. P_WS_BASE: where this
// launch's partial products start in the split workspace (launches of one dispatch that run
// together use disjoint parts).
const uint P_M = 0, P_N = 1, P_K = 2, P_KCHUNK = 9, P_SPLITS = 10, P_BATCHES = 11, P_WS_BASE = 30;

layout(push_constant) uniform P { uint w[32]; } pc;

// floor(x / d) for x < 2^31 by a multiply-high: m = ceil(2^(31 + l) / d) with l = ceil(log2 d),
// q = mulhi(x, m) >> (l - 1); d = 1 is m = 0 (the host computes m and l).
uint fast_div(uint x, uint m, uint l) {
  uint hi, lo;
  umulExtended(x, m, hi, lo);
  return m == 0u ? x : hi >> (l - 1u);
}

uint g_kend;  // end of this invocation's K chunk: the loaders read zero at and past it
