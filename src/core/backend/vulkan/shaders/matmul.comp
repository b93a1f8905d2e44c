#version 450
// Batched C = op(A) op(B) on the GEMM core (gemm.glsl): transposes folded into the loads,
// aligned operands read as vec4s. With EPILOGUE (the matmul_epilogue op), the fused program
// (fused.comp's encoding) runs on each result before it is stored: its input 0 is the
// product, input k >= 1 the dispatch's input k + 1, broadcast by the schedule's layout.
//
// Bindings: 0 A, 1 B, 2 C. A split GEMM writes its partial products through binding 2 and
// its reduction reads them through binding 0. EPILOGUE (the wide layout): 0 A, 1 B, 2-7 the
// program's inputs 1-6, 8 C, 10 its input 7, 11 the split workspace (the program: specialisation
// constants, epilogue.glsl).
#include "gemm_params.glsl"

// Push words besides the shared ones: leading dimensions and the batches' element strides
// (0: the operand is shared by every batch).
const uint P_LDA = 3, P_LDB = 4, P_LDC = 5, P_BATCH_A = 6, P_BATCH_B = 7, P_BATCH_C = 8;

#include "gemm_operands.glsl"

#ifdef EPILOGUE
layout(std430, binding = 8) writeonly buffer C { float c[]; };
layout(std430, binding = 8) writeonly buffer C4 { vec4 c4[]; };
// A program ending in a rounding may store its results in 16 bits (C_FORMAT), pairs of
// columns to a word (the lowering guarantees N even).
layout(std430, binding = 8) writeonly buffer CH { uint ch[]; };
layout(std430, binding = 8) writeonly buffer CH2 { uvec2 ch2[]; };
uint c_bits(float v) { return C_FORMAT == HALF_F16 ? f16_bits(v) : bf16_bits(v); }
layout(std430, binding = 11) buffer W { float ws[]; };
layout(std430, binding = 11) buffer W4 { vec4 ws4[]; };
float ws_load(uint i) { return ws[i]; }
vec4 ws_load4(uint i) { return ws4[i]; }
void ws_store(uint i, float v) { ws[i] = v; }
void ws_store4(uint i, vec4 v) { ws4[i] = v; }
#include "epilogue.glsl"
#else
layout(std430, binding = 2) writeonly buffer C { float c[]; };
layout(std430, binding = 2) writeonly buffer C4 { vec4 c4[]; };
float ws_load(uint i) { return a[i]; }
vec4 ws_load4(uint i) { return a4[i]; }
void ws_store(uint i, float v) { c[i] = v; }
void ws_store4(uint i, vec4 v) { c4[i] = v; }
#endif

// A quads: along K, op(A)[row][k..k+3] = A[row][k..]; along M (A transposed in memory),
// op(A)[row..row+3][k] = A[k][row..]. Rows past M read row M - 1.
struct ARef {
  uint base, row;
};
ARef a_ref(uint batch, uint row) {
  const uint m = pc.w[P_M], last = A_ALONG_K != 0 || VEC_A == 0 ? m - 1 : m - 4;
  return ARef(batch * pc.w[P_BATCH_A], min(row, last));
}
vec4 a_quad(ARef r, uint k) {
  const uint lda = pc.w[P_LDA];
  vec4 v = vec4(0.0);
  if (A_ALONG_K != 0) {
    const uint at = r.base + r.row * lda + k;
    if (VEC_A != 0) return k < g_kend ? a_load4(at / 4) : v;
    [[unroll]] for (uint c = 0; c < 4; ++c) v[c] = k + c < g_kend ? a_load(at + c) : 0.0;
    return v;
  }
  if (k >= g_kend) return v;
  const uint at = r.base + k * lda;
  if (VEC_A != 0) return a_load4((at + r.row) / 4);
  const uint last = pc.w[P_M] - 1;
  [[unroll]] for (uint c = 0; c < 4; ++c) v[c] = a_load(at + min(r.row + c, last));
  return v;
}

// B quads: along N, op(B)[k][col..col+3] = B[k][col..]; along K (B transposed in memory),
// op(B)[k..k+3][col] = B[col][k..]. Columns past N read column N - 1.
struct BRef {
  uint base, col;
};
BRef b_ref(uint batch, uint col) {
  const uint n = pc.w[P_N], last = B_ALONG_N == 0 || VEC_B == 0 ? n - 1 : n - 4;
  return BRef(batch * pc.w[P_BATCH_B], min(col, last));
}
vec4 b_quad(BRef r, uint k) {
  const uint ldb = pc.w[P_LDB];
  vec4 v = vec4(0.0);
  if (B_ALONG_N == 0) {
    const uint at = r.base + r.col * ldb + k;
    if (VEC_B != 0) return k < g_kend ? b_load4(at / 4) : v;
    [[unroll]] for (uint c = 0; c < 4; ++c) v[c] = k + c < g_kend ? b_load(at + c) : 0.0;
    return v;
  }
  if (k >= g_kend) return v;
  const uint at = r.base + k * ldb;
  if (VEC_B != 0) return b_load4((at + r.col) / 4);
  const uint last = pc.w[P_N] - 1;
  [[unroll]] for (uint c = 0; c < 4; ++c) v[c] = b_load(at + min(r.col + c, last));
  return v;
}

void store_c(uint batch, uint row, uint col, vec4 v) {
  const uint n = pc.w[P_N];
#ifdef EPILOGUE
  v = epilogue((batch * pc.w[P_M] + row) * n + col, min(n - col, 4u), v);
#endif
  const uint at = batch * pc.w[P_BATCH_C] + row * pc.w[P_LDC] + col;
#ifdef EPILOGUE
  if (C_FORMAT != HALF_F32) {
    const uvec2 w = uvec2(c_bits(v.x) | (c_bits(v.y) << 16), c_bits(v.z) | (c_bits(v.w) << 16));
    if (VEC_C != 0) {
      ch2[at / 4] = w;
    } else {
      if (col < n) ch[at / 2] = w.x;
      if (col + 2 < n) ch[at / 2 + 1] = w.y;
    }
    return;
  }
#endif
  if (VEC_C != 0) {
    c4[at / 4] = v;
    return;
  }
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    if (col + i < n) c[at + i] = v[i];
  }
}

#include "gemm.glsl"
