#version 450
// matmul_q over more rows than a few (prompt chunks) on the GEMM core (gemm.glsl): C = X W^T
// for a weight W [n, k] in a block format, decoded as its quads are loaded, so the weights
// travel as blocks and are never written out as f32. OPERATION: 0 Q8_0
// (an f16 scale, 32 signed bytes), 1 Q4_0 (an f16 scale, 16 bytes of nibbles: entries 0-15 low,
// 16-31 high, each (nibble - 8) * scale). Blocks are 34 and 18 bytes, read as words (every
// offset in them even; with BYTES, on devices with 8-bit storage, as bytes). K is a multiple
// of 32, so a quad never spans two blocks.
//
// Bindings: 0 X [m, k], 1 W (words), 2 C [m, n]; a split GEMM writes its partial products
// through 2 and its reduction reads them through 0.
#include "gemm_params.glsl"
#include "block_bytes.glsl"

const uint P_LDA = 3;  // X's row length (k)

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };
layout(std430, binding = 2) writeonly buffer C4 { vec4 c4[]; };
float ws_load(uint i) { return a[i]; }
vec4 ws_load4(uint i) { return a4[i]; }
void ws_store(uint i, float v) { c[i] = v; }
void ws_store4(uint i, vec4 v) { c4[i] = v; }

const uint BLOCK_BYTES = OPERATION == 0 ? 34 : 18;

struct ARef {
  uint row;
};
ARef a_ref(uint batch, uint row) { return ARef(min(row, pc.w[P_M] - 1)); }
vec4 a_quad(ARef r, uint k) {
  const uint at = r.row * pc.w[P_LDA] + k;
  if (k >= g_kend) return vec4(0.0);
  if (VEC_A != 0) return a4[at / 4];
  return vec4(a[at], a[at + 1], a[at + 2], a[at + 3]);
}

// The weight row's first byte; columns past N read column N - 1.
struct BRef {
  uint row;
};
BRef b_ref(uint batch, uint col) { return BRef(min(col, pc.w[P_N] - 1) * (pc.w[P_K] / 32) * BLOCK_BYTES); }

// op(B)[k..k+3][col] = W[col][k..k+3].
vec4 b_quad(BRef r, uint k) {
  if (k >= g_kend) return vec4(0.0);
  const uint block = r.row + (k / 32) * BLOCK_BYTES, e = k % 32;
  const float d = half_at(block);
  if (OPERATION == 0) {
    const int v = int(bytes4(block + 2 + e));
    return d * vec4(bitfieldExtract(v, 0, 8), bitfieldExtract(v, 8, 8), bitfieldExtract(v, 16, 8), bitfieldExtract(v, 24, 8));
  }
  const uint v = bytes4(block + 2 + e % 16) >> (e < 16 ? 0u : 4u);
  return d * (vec4(v & 15u, (v >> 8) & 15u, (v >> 16) & 15u, (v >> 24) & 15u) - 8.0);
}

void store_c(uint batch, uint row, uint col, vec4 v) {
  const uint n = pc.w[P_N], at = row * n + col;
  if (VEC_C != 0) {
    c4[at / 4] = v;
    return;
  }
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    if (col + i < n) c[at + i] = v[i];
  }
}

#include "gemm.glsl"
