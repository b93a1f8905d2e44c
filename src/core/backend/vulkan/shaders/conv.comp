#version 450
// 2-D convolution and its two gradients as implicit GEMMs on the GEMM core (gemm.glsl): the
// im2col matrix is never built, its quads are gathered from the image as the core asks for
// them (zero where the window leaves the image). One GEMM per group (the core's batch):
//   FORWARD      rows: output pixels (n, oy, ox)  columns: the group's output channels
//                K: the window (c, i, j)  A: the input  B: the weights
//   INPUT_GRAD   one launch per stride phase (ry, rx): rows: the input pixels
//                (n, ry + sy y', rx + sx x'), columns: the group's input channels, K: (o, ti, tj)
//                over the taps that reach those pixels, i = i0 + ty ti, j = j0 + tx tj (a stride
//                of 2 skips no zero products); A: dY[n][o][c0y + y' - dy' ti][c0x + x' - dx' tj]
//                where inside, B: the weights of those taps
//   WEIGHT_GRAD  rows: the window (c, i, j)  columns: the group's output channels
//                K: (n, oy, ox)  A: the input  B: dY
// CHANNELS_LAST (VEC_A): the gathered operand (x, or dY for the input gradient) was staged
// channels-last ([n][y][x][c]) by MODE_PERMUTE launches, and K (or the weight gradient's rows)
// runs channel-fastest, so its quads are 4 channels of one pixel: vec4 loads. The forward
// pass and the input gradient then read weights staged in that K order too (vec4 along K).
// Otherwise K runs (c, i, j) over the tensors as they are, gathering scalars. Every pass's
// operands may be stored in 16 bits (gemm_operands.glsl): the gathers, the staging copies and
// the weight gradient's dY loads read them so, the staged copies are f32.
// Bindings: 0 A, 1 B, 2 the result (x or dY, w or dY, or the staged copies in the workspace at
// P_A_BASE and P_B_BASE); a split GEMM writes its partial products through binding 2 and its
// reduction reads them through binding 0. Index division goes through fast_div with
// multipliers the host computes.
#include "gemm_params.glsl"

const uint FORWARD = 0, INPUT_GRAD = 1, WEIGHT_GRAD = 2;
const uint MODE_PERMUTE = 2;
// Push words besides the shared ones. P_GEOMETRY: strides sy, sx and dilations dy, dx (a
// byte each); P_PADS: paddings py, px (signed 16 bits each). The input gradient's phase:
// P_PADS its first output row and column (c0y, c0x), the dilation bytes how far the output
// pixel moves per tap (dy', dx'), P_TAPS its first taps i0, j0 and tap steps ty, tx, P_PHASE
// ry, rx and its tap counts TY, TX (a byte each).
const uint P_C = 3, P_H = 4, P_W = 5, P_O = 6, P_OH = 7, P_OW = 8, P_KH = 12, P_KW = 13, P_GEOMETRY = 14;
const uint P_A_BASE = 15, P_PADS = 16, P_B_BASE = 17, P_CG = 20, P_OG = 21, P_TAPS = 29, P_PHASE = 31;
// Divisions: K's groups (KK: the window, or with CHANNELS_LAST the channels) and tap rows
// (KW, or the phase's TX), the rows' or K's pixels per image (PIX) and per line (ROW): the
// divisors, their multipliers, their shifts a byte each in P_SHIFTS (KK, KW, PIX, ROW).
const uint P_KK = 18, P_KWD = 19, P_MKK = 22, P_MKW = 23, P_MPIX = 24, P_MROW = 25, P_PIX = 26, P_ROW = 27;
const uint P_SHIFTS = 28;
const bool CHANNELS_LAST = VEC_A != 0;

#include "gemm_operands.glsl"
layout(std430, binding = 2) writeonly buffer C { float c[]; };
layout(std430, binding = 2) writeonly buffer C4 { vec4 c4[]; };
float ws_load(uint i) { return a[i]; }
vec4 ws_load4(uint i) { return a4[i]; }
void ws_store(uint i, float v) { c[i] = v; }
void ws_store4(uint i, vec4 v) { c4[i] = v; }

uint byte_of(uint word, uint i) { return (pc.w[word] >> (8 * i)) & 0xffu; }
int half_of(uint word, uint i) { return (int(pc.w[word]) << (16 - 16 * i)) >> 16; }
uint sy() { return byte_of(P_GEOMETRY, 0); }
uint sx() { return byte_of(P_GEOMETRY, 1); }
uint dy() { return byte_of(P_GEOMETRY, 2); }
uint dx() { return byte_of(P_GEOMETRY, 3); }
uint window() { return pc.w[P_KH] * pc.w[P_KW]; }

// (channel, tap row, tap column) of a K index: (c, i, j) with j fastest, or with
// CHANNELS_LAST ((i, j), c) with c fastest (the weight gradient's rows likewise).
uvec3 tap(uint k) {
  const uint q = fast_div(k, pc.w[P_MKK], byte_of(P_SHIFTS, 0)), r = k - q * pc.w[P_KK];
  const uint t = CHANNELS_LAST ? q : r, i = fast_div(t, pc.w[P_MKW], byte_of(P_SHIFTS, 1));
  return uvec3(CHANNELS_LAST ? r : q, i, t - i * pc.w[P_KWD]);
}
// (image, line, column) of a pixel index over PIX pixels an image, ROW a line.
uvec3 pixel(uint p) {
  const uint n = fast_div(p, pc.w[P_MPIX], byte_of(P_SHIFTS, 2)), q = p - n * pc.w[P_PIX];
  const uint y = fast_div(q, pc.w[P_MROW], byte_of(P_SHIFTS, 3));
  return uvec3(n, y, q - y * pc.w[P_ROW]);
}
bool inside(int y, int x, uint h, uint w) { return y >= 0 && y < int(h) && x >= 0 && x < int(w); }

// A row's fixed part: where its image or dY starts (channels-last: the element of channel 0 of
// the group; else the group's first plane), and the window's origin (the weight gradient's:
// the tap's offset from the output pixel).
struct ARef {
  uint base;
  int y0, x0;
};
ARef a_ref(uint g, uint row) {
  const uint hw = pc.w[P_H] * pc.w[P_W];
  if (OPERATION == WEIGHT_GRAD) {
    const uvec3 t = tap(min(row, pc.w[P_M] - (CHANNELS_LAST ? 4 : 1)));
    const uint base = CHANNELS_LAST ? pc.w[P_A_BASE] + g * pc.w[P_CG] + t.x : (g * pc.w[P_CG] + t.x) * hw;
    return ARef(base, int(t.y * dy()) - half_of(P_PADS, 0), int(t.z * dx()) - half_of(P_PADS, 1));
  }
  const uvec3 p = pixel(min(row, pc.w[P_M] - 1));
  if (OPERATION == FORWARD) {
    const uint base = CHANNELS_LAST ? pc.w[P_A_BASE] + p.x * hw * pc.w[P_C] + g * pc.w[P_CG]
                                    : (p.x * pc.w[P_C] + g * pc.w[P_CG]) * hw;
    return ARef(base, int(p.y * sy()) - half_of(P_PADS, 0), int(p.z * sx()) - half_of(P_PADS, 1));
  }
  const uint planes = pc.w[P_OH] * pc.w[P_OW] * pc.w[P_O];
  const uint base = CHANNELS_LAST ? pc.w[P_A_BASE] + p.x * planes + g * pc.w[P_OG]
                                  : (p.x * pc.w[P_O] + g * pc.w[P_OG]) * pc.w[P_OH] * pc.w[P_OW];
  return ARef(base, half_of(P_PADS, 0) + int(p.y), half_of(P_PADS, 1) + int(p.z));
}

// The gathered element (NCHW) at K index k, or zero outside the image or the chunk.
float a_at(ARef r, uint k) {
  if (k >= g_kend) return 0.0;
  if (OPERATION == WEIGHT_GRAD) {
    const uvec3 p = pixel(k);
    const int iy = int(p.y * sy()) + r.y0, ix = int(p.z * sx()) + r.x0;
    if (!inside(iy, ix, pc.w[P_H], pc.w[P_W])) return 0.0;
    return a_load(p.x * pc.w[P_C] * pc.w[P_H] * pc.w[P_W] + r.base + uint(iy) * pc.w[P_W] + uint(ix));
  }
  const uvec3 t = tap(k);
  if (OPERATION == FORWARD) {
    const int iy = r.y0 + int(t.y * dy()), ix = r.x0 + int(t.z * dx());
    if (!inside(iy, ix, pc.w[P_H], pc.w[P_W])) return 0.0;
    return a_load(r.base + (t.x * pc.w[P_H] + uint(iy)) * pc.w[P_W] + uint(ix));
  }
  const int oy = r.y0 - int(t.y * dy()), ox = r.x0 - int(t.z * dx());
  if (!inside(oy, ox, pc.w[P_OH], pc.w[P_OW])) return 0.0;
  return a_load(r.base + (t.x * pc.w[P_OH] + uint(oy)) * pc.w[P_OW] + uint(ox));
}

// Channels-last quads: 4 channels of one pixel (K along channels; the weight gradient's quads
// are its rows' channels at pixel k).
vec4 a_quad_channels(ARef r, uint k) {
  if (k >= g_kend) return vec4(0.0);
  if (OPERATION == WEIGHT_GRAD) {
    const uvec3 p = pixel(k);
    const int iy = int(p.y * sy()) + r.y0, ix = int(p.z * sx()) + r.x0;
    if (!inside(iy, ix, pc.w[P_H], pc.w[P_W])) return vec4(0.0);
    return a4[(r.base + ((p.x * pc.w[P_H] + uint(iy)) * pc.w[P_W] + uint(ix)) * pc.w[P_C]) / 4];
  }
  const uvec3 t = tap(k);
  if (OPERATION == FORWARD) {
    const int iy = r.y0 + int(t.y * dy()), ix = r.x0 + int(t.z * dx());
    if (!inside(iy, ix, pc.w[P_H], pc.w[P_W])) return vec4(0.0);
    return a4[(r.base + (uint(iy) * pc.w[P_W] + uint(ix)) * pc.w[P_C] + t.x) / 4];
  }
  const int oy = r.y0 - int(t.y * dy()), ox = r.x0 - int(t.z * dx());
  if (!inside(oy, ox, pc.w[P_OH], pc.w[P_OW])) return vec4(0.0);
  return a4[(r.base + (uint(oy) * pc.w[P_OW] + uint(ox)) * pc.w[P_O] + t.x) / 4];
}

vec4 a_quad(ARef r, uint k) {
  if (CHANNELS_LAST) return a_quad_channels(r, k);
  return vec4(a_at(r, k), a_at(r, k + 1), a_at(r, k + 2), a_at(r, k + 3));
}

// B quads along K for one column (B_ALONG_N is 0): the weights as they are (forward: W[o][k]),
// staged in K order (forward and input gradient with CHANNELS_LAST: [g][column][k]), the
// phase's taps of W[o][c][i][j] (input gradient), or dY[n][o][p..p+3] (weight gradient).
struct BRef {
  uint base;
};
BRef b_ref(uint g, uint col) {
  col = min(col, pc.w[P_N] - 1);
  if (OPERATION == WEIGHT_GRAD) return BRef((g * pc.w[P_OG] + col) * pc.w[P_OH] * pc.w[P_OW]);
  if (OPERATION == FORWARD || CHANNELS_LAST) return BRef(pc.w[P_B_BASE] + (g * pc.w[P_N] + col) * pc.w[P_K]);
  return BRef((g * pc.w[P_OG] * pc.w[P_CG] + col) * window() + byte_of(P_TAPS, 0) * pc.w[P_KW] + byte_of(P_TAPS, 1));
}

float b_at(BRef r, uint k) {
  if (k >= g_kend) return 0.0;
  if (OPERATION == WEIGHT_GRAD) {
    const uint n = pixel(k).x;
    return b_load(n * pc.w[P_O] * pc.w[P_OH] * pc.w[P_OW] + r.base + k - n * pc.w[P_PIX]);
  }
  if (OPERATION == FORWARD || CHANNELS_LAST) return b_load(r.base + k);
  const uvec3 t = tap(k);
  return b_load(r.base + t.x * pc.w[P_CG] * window() + t.y * byte_of(P_TAPS, 2) * pc.w[P_KW] + t.z * byte_of(P_TAPS, 3));
}

vec4 b_quad(BRef r, uint k) {
  if (VEC_B != 0) {
    if (k >= g_kend) return vec4(0.0);
    if (OPERATION != WEIGHT_GRAD) return b_load4((r.base + k) / 4);
    const uint n = pixel(k).x;
    return b_load4((n * pc.w[P_O] * pc.w[P_OH] * pc.w[P_OW] + r.base + k - n * pc.w[P_PIX]) / 4);
  }
  return vec4(b_at(r, k), b_at(r, k + 1), b_at(r, k + 2), b_at(r, k + 3));
}

void store_c(uint g, uint row, uint col, vec4 v) {
  const uint n = pc.w[P_N];
  uvec3 t = uvec3(0), p = uvec3(0);
  if (OPERATION == WEIGHT_GRAD) {
    t = tap(row);
  } else {
    p = pixel(row);
  }
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    if (col + i >= n) continue;
    const uint ch = col + i;
    if (OPERATION == WEIGHT_GRAD) {
      c[((g * pc.w[P_OG] + ch) * pc.w[P_CG] + t.x) * window() + t.y * pc.w[P_KW] + t.z] = v[i];
    } else if (OPERATION == FORWARD) {
      c[((p.x * pc.w[P_O] + g * pc.w[P_OG] + ch) * pc.w[P_OH] + p.y) * pc.w[P_OW] + p.z] = v[i];
    } else {
      const uint iy = byte_of(P_PHASE, 0) + p.y * sy(), ix = byte_of(P_PHASE, 1) + p.z * sx();
      c[((p.x * pc.w[P_C] + g * pc.w[P_CG] + ch) * pc.w[P_H] + iy) * pc.w[P_W] + ix] = v[i];
    }
  }
}

// MODE_PERMUTE: out[base + e] = in[source + sum_d index_d(e) stride_d] over 5 dimensions
// (innermost last), reading binding 1 and writing binding 2: the channels-last staging.
const uint P_NUMEL = 0, P_OUT_BASE = 1, P_SOURCE = 2, P_EXTENTS = 3, P_MULTIPLIERS = 8, P_DIM_SHIFTS = 13;
const uint P_STRIDES = 15;
void permute() {
  const uint e = flat_index();
  if (e >= pc.w[P_NUMEL]) return;
  uint rest = e, at = pc.w[P_SOURCE];
  [[unroll]] for (int d = 4; d >= 0; --d) {
    const uint q = fast_div(rest, pc.w[P_MULTIPLIERS + d], byte_of(P_DIM_SHIFTS + d / 4, d % 4));
    at += (rest - q * pc.w[P_EXTENTS + d]) * pc.w[P_STRIDES + d];
    rest = q;
  }
  c[pc.w[P_OUT_BASE] + e] = b_load(at);
}
#define EXTRA_MODES permute

#include "gemm.glsl"
