#version 450
// 2-D convolution and its two gradients as implicit GEMMs on the GEMM core (gemm.glsl): the
// im2col matrix is never built, its quads are gathered from the image as the core asks for
// them (zero where the window leaves the image). One GEMM per group (the core's batch):
//   FORWARD      rows: output pixels (n, oy, ox)  columns: the group's output channels
//                K: (c, i, j)  A: the input image  B: the weights, W[o][k]
//   INPUT_GRAD   one launch per stride phase (ry, rx): rows: the input pixels
//                (n, ry + sy y', rx + sx x'), columns: the group's input channels, K: (o, ti, tj)
//                over the taps that reach those pixels, i = i0 + ty ti, j = j0 + tx tj (a stride
//                of 2 skips no zero products); A: dY[n][o][c0y + y' - dy' ti][c0x + x' - dx' tj]
//                where inside, B: W[o][c][i][j]
//   WEIGHT_GRAD  rows: (c, i, j)   columns: the group's output channels
//                K: (n, oy, ox)  A: the input image  B: dY[n][o][oy][ox]
// Bindings: 0 A (x or dY), 1 B (w or dY), 2 the result; a split GEMM writes its partial
// products through binding 2 and its reduction reads them through binding 0. Index division
// by the sizes goes through fast_div with multipliers the host computes.
#include "gemm_params.glsl"

const uint FORWARD = 0, INPUT_GRAD = 1, WEIGHT_GRAD = 2;
// Push words besides the shared ones. The input gradient's phase: P_PY, P_PX its first output
// row and column (c0y, c0x, signed), P_DY, P_DX how far an output pixel moves per tap (dy',
// dx'), P_TAPS its first taps i0, j0 and tap steps ty, tx (a byte each), P_PHASE ry, rx and
// its tap counts TY, TX (a byte each).
const uint P_C = 3, P_H = 4, P_W = 5, P_O = 6, P_OH = 7, P_OW = 8, P_KH = 12, P_KW = 13;
const uint P_SY = 14, P_SX = 15, P_PY = 16, P_PX = 17, P_DY = 18, P_DX = 19, P_CG = 20, P_OG = 21;
const uint P_TAPS = 29, P_PHASE = 31;
// Divisions: K's taps KK (KH KW, or TY TX) and KW (or TX), the rows' or K's pixels PIX and
// ROW (per image and per line): multipliers, the divisors themselves (PIX, ROW), shifts a byte
// each in P_SHIFTS (KK, KW, PIX, ROW).
const uint P_MKK = 22, P_MKW = 23, P_MPIX = 24, P_MROW = 25, P_PIX = 26, P_ROW = 27, P_SHIFTS = 28;

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };
layout(std430, binding = 2) writeonly buffer C4 { vec4 c4[]; };
float ws_load(uint i) { return a[i]; }
vec4 ws_load4(uint i) { return a4[i]; }
void ws_store(uint i, float v) { c[i] = v; }
void ws_store4(uint i, vec4 v) { c4[i] = v; }

uint byte_of(uint word, uint i) { return (pc.w[word] >> (8 * i)) & 0xffu; }
// Taps per K group (a channel) and per tap row.
uint taps() { return OPERATION == INPUT_GRAD ? byte_of(P_PHASE, 2) * byte_of(P_PHASE, 3) : pc.w[P_KH] * pc.w[P_KW]; }
uint tap_row() { return OPERATION == INPUT_GRAD ? byte_of(P_PHASE, 3) : pc.w[P_KW]; }
// (channel, tap row, tap column) of a K index over (c or o, i, j).
uvec3 tap(uint k) {
  const uint ch = fast_div(k, pc.w[P_MKK], byte_of(P_SHIFTS, 0)), r = k - ch * taps();
  const uint i = fast_div(r, pc.w[P_MKW], byte_of(P_SHIFTS, 1));
  return uvec3(ch, i, r - i * tap_row());
}
// (image, line, column) of a pixel index over PIX pixels an image, ROW a line.
uvec3 pixel(uint p) {
  const uint n = fast_div(p, pc.w[P_MPIX], byte_of(P_SHIFTS, 2)), q = p - n * pc.w[P_PIX];
  const uint y = fast_div(q, pc.w[P_MROW], byte_of(P_SHIFTS, 3));
  return uvec3(n, y, q - y * pc.w[P_ROW]);
}

// A row's fixed part: where its image (forward, weight gradient) or its dY planes (input
// gradient) start, and the window's origin (the weight gradient's: the tap's offset).
struct ARef {
  uint base;
  int y0, x0;
};
ARef a_ref(uint g, uint row) {
  row = min(row, pc.w[P_M] - 1);
  if (OPERATION == WEIGHT_GRAD) {
    const uvec3 t = tap(row);
    return ARef((g * pc.w[P_CG] + t.x) * pc.w[P_H] * pc.w[P_W], int(t.y * pc.w[P_DY]) - int(pc.w[P_PY]),
                int(t.z * pc.w[P_DX]) - int(pc.w[P_PX]));
  }
  const uvec3 p = pixel(row);
  if (OPERATION == FORWARD) {
    return ARef((p.x * pc.w[P_C] + g * pc.w[P_CG]) * pc.w[P_H] * pc.w[P_W], int(p.y * pc.w[P_SY]) - int(pc.w[P_PY]),
                int(p.z * pc.w[P_SX]) - int(pc.w[P_PX]));
  }
  return ARef((p.x * pc.w[P_O] + g * pc.w[P_OG]) * pc.w[P_OH] * pc.w[P_OW], int(pc.w[P_PY]) + int(p.y),
              int(pc.w[P_PX]) + int(p.z));
}

float a_at(ARef r, uint k) {
  if (k >= g_kend) return 0.0;
  if (OPERATION == WEIGHT_GRAD) {
    const uvec3 p = pixel(k);
    const int iy = int(p.y * pc.w[P_SY]) + r.y0, ix = int(p.z * pc.w[P_SX]) + r.x0;
    if (iy < 0 || iy >= int(pc.w[P_H]) || ix < 0 || ix >= int(pc.w[P_W])) return 0.0;
    return a[p.x * pc.w[P_C] * pc.w[P_H] * pc.w[P_W] + r.base + uint(iy) * pc.w[P_W] + uint(ix)];
  }
  const uvec3 t = tap(k);
  if (OPERATION == FORWARD) {
    const int iy = r.y0 + int(t.y * pc.w[P_DY]), ix = r.x0 + int(t.z * pc.w[P_DX]);
    if (iy < 0 || iy >= int(pc.w[P_H]) || ix < 0 || ix >= int(pc.w[P_W])) return 0.0;
    return a[r.base + (t.x * pc.w[P_H] + uint(iy)) * pc.w[P_W] + uint(ix)];
  }
  const int oy = r.y0 - int(t.y * pc.w[P_DY]), ox = r.x0 - int(t.z * pc.w[P_DX]);
  if (oy < 0 || oy >= int(pc.w[P_OH]) || ox < 0 || ox >= int(pc.w[P_OW])) return 0.0;
  return a[r.base + (t.x * pc.w[P_OH] + uint(oy)) * pc.w[P_OW] + uint(ox)];
}

vec4 a_quad(ARef r, uint k) { return vec4(a_at(r, k), a_at(r, k + 1), a_at(r, k + 2), a_at(r, k + 3)); }

// B quads along K for one column (B_ALONG_N is 0): W[o][k..k+3] (forward), dY[n][o][p..p+3]
// (weight gradient, vec4 when an image's pixels are a multiple of 4), W[o][c][i][j] over the
// phase's taps (input gradient).
struct BRef {
  uint base;
};
BRef b_ref(uint g, uint col) {
  col = min(col, pc.w[P_N] - 1);
  const uint kk = pc.w[P_KH] * pc.w[P_KW];
  if (OPERATION == FORWARD) return BRef((g * pc.w[P_OG] + col) * pc.w[P_K]);
  if (OPERATION == WEIGHT_GRAD) return BRef((g * pc.w[P_OG] + col) * pc.w[P_OH] * pc.w[P_OW]);
  return BRef((g * pc.w[P_OG] * pc.w[P_CG] + col) * kk + byte_of(P_TAPS, 0) * pc.w[P_KW] + byte_of(P_TAPS, 1));
}

float b_at(BRef r, uint k) {
  if (k >= g_kend) return 0.0;
  if (OPERATION == FORWARD) return b[r.base + k];
  if (OPERATION == WEIGHT_GRAD) {
    const uvec3 p = pixel(k);
    return b[p.x * pc.w[P_O] * pc.w[P_OH] * pc.w[P_OW] + r.base + k - p.x * pc.w[P_PIX]];
  }
  const uvec3 t = tap(k);
  return b[r.base + t.x * pc.w[P_CG] * pc.w[P_KH] * pc.w[P_KW] + t.y * byte_of(P_TAPS, 2) * pc.w[P_KW] +
           t.z * byte_of(P_TAPS, 3)];
}

vec4 b_quad(BRef r, uint k) {
  if (VEC_B != 0) {
    if (k >= g_kend) return vec4(0.0);
    if (OPERATION == FORWARD) return b4[(r.base + k) / 4];
    const uint n = pixel(k).x;
    return b4[(n * pc.w[P_O] * pc.w[P_OH] * pc.w[P_OW] + r.base + k - n * pc.w[P_PIX]) / 4];
  }
  return vec4(b_at(r, k), b_at(r, k + 1), b_at(r, k + 2), b_at(r, k + 3));
}

void store_c(uint g, uint row, uint col, vec4 v) {
  const uint n = pc.w[P_N];
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    if (col + i >= n) continue;
    const uint ch = col + i;
    if (OPERATION == WEIGHT_GRAD) {
      c[(g * pc.w[P_OG] + ch) * pc.w[P_CG] * pc.w[P_KH] * pc.w[P_KW] + row] = v[i];
    } else if (OPERATION == FORWARD) {
      const uvec3 p = pixel(row);
      c[((p.x * pc.w[P_O] + g * pc.w[P_OG] + ch) * pc.w[P_OH] + p.y) * pc.w[P_OW] + p.z] = v[i];
    } else {
      const uvec3 p = pixel(row);
      const uint iy = byte_of(P_PHASE, 0) + p.y * pc.w[P_SY], ix = byte_of(P_PHASE, 1) + p.z * pc.w[P_SX];
      c[((p.x * pc.w[P_C] + g * pc.w[P_CG] + ch) * pc.w[P_H] + iy) * pc.w[P_W] + ix] = v[i];
    }
  }
}

#include "gemm.glsl"
