#version 450
#extension GL_EXT_control_flow_attributes : require
// Flash attention, tiled through shared memory; the packed layout of attention_fused (the
// output, then each query row's log-sum-exp). A workgroup computes a tile of BR rows: query
// rows (FORWARD, GRAD_Q) or key rows (GRAD_KV) of one head, and streams the other side in
// blocks of BC columns through shared memory. Its invocations form BR / TM groups of TX: each
// holds TM rows by BC / TX columns of the score block and TM rows by a TX-th of the head
// columns of the accumulators, in registers (register loops over compile-time sizes are
// unrolled). FORWARD: an online softmax (the row maximum exchanged through shared memory per
// block); GRAD_Q and GRAD_KV recompute the probabilities from the saved log-sum-exp and the
// DELTA launch's dO . O - dlse per row; GRAD_KV walks every query head of its key/value head's
// group, so grouped-query attention never repeats keys and dK, dV need no atomics.
// Causal: key j is visible to query i when j <= i + sk - sq; blocks beyond every row's last key
// are skipped. Masked scores are a finite sentinel, never infinities.
#include "common.glsl"

layout(constant_id = 1) const uint D = 64;     // query and key head dimension
layout(constant_id = 2) const uint DV = 64;    // value head dimension
layout(constant_id = 3) const uint BC = 32;    // columns per block, a multiple of TX
layout(constant_id = 4) const uint SMEM = 16;  // floats of shared memory the mode uses
layout(constant_id = 5) const uint MODE = 0;   // one pipeline per mode: only its code is compiled

const uint TX = 8, TM = 4;  // invocations per row group; rows per invocation
const uint WG = gl_WorkGroupSize.x, BR = TM * (WG / TX), TN = BC / TX;
const uint CD = (D + TX - 1) / TX, CV = (DV + TX - 1) / TX;  // head columns per invocation
const uint RP = BR + 1, CP = BC + 1;                         // padded strides of shared tiles

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
// 16-bit q, k and v (half.glsl), in every mode but DELTA: formats in HALF's bits 0-1, 2-3, 4-5.
#include "half.glsl"
layout(constant_id = 15) const uint HALF = 0;
layout(std430, binding = 0) readonly buffer QH { uint qh[]; };
layout(std430, binding = 1) readonly buffer KH { uint kh[]; };
layout(std430, binding = 2) readonly buffer VH { uint vh[]; };
float q_at(uint i) { return (HALF & 3u) != HALF_F32 ? half_value(qh[i >> 1], i, HALF & 3u) : q[i]; }
float k_at(uint i) { return ((HALF >> 2) & 3u) != HALF_F32 ? half_value(kh[i >> 1], i, (HALF >> 2) & 3u) : k[i]; }
float v_at(uint i) { return ((HALF >> 4) & 3u) != HALF_F32 ? half_value(vh[i >> 1], i, (HALF >> 4) & 3u) : v[i]; }
layout(std430, binding = 3) readonly buffer O { float packed[]; };   // out, then lse
layout(std430, binding = 4) readonly buffer G { float gpacked[]; };  // their gradients
layout(std430, binding = 5) buffer W { float ws[]; };                // dO . O - dlse per query row
layout(std430, binding = 8) writeonly buffer Y { float y[]; };

const uint B = 0, HQ = 1, HKV = 2, SQ = 3, SK = 4;
const uint SCALE = 25, CAUSAL = 26;
const uint FORWARD = 0, GRAD_Q = 1, GRAD_KV = 2, DELTA = 3;
const float MASKED = -1.0e30, VISIBLE = -1.0e29;

layout(push_constant) uniform P { uint w[32]; } pc;

shared float smem[SMEM];

uint tid, ty, tx;  // the invocation, its row group and its place in the group

// The last key query row i sees (-1: none).
int last_key(uint i) {
  const int sq = int(pc.w[SQ]), sk = int(pc.w[SK]);
  return pc.w[CAUSAL] != 0u ? min(int(i) + sk - sq, sk - 1) : sk - 1;
}

// Rows [r0, r0 + BR) x columns [0, cols) of a row-major matrix at src, transposed into smem at
// `at` with row stride `stride` (element (r, c) at at + c * stride + r); rows past `rows` are 0.
void load_transposed(uint at, uint stride, uint base, uint r0, uint nrows, uint rows, uint cols, uint which) {
  for (uint e = tid; e < nrows * cols; e += WG) {
    const uint r = e / cols, c = e % cols;
    float x = 0.0;
    if (r0 + r < rows) {
      const uint g = (base + r0 + r) * cols + c;
      x = which == 0u ? q_at(g) : which == 1u ? k_at(g) : which == 2u ? v_at(g) : gpacked[g];
    }
    smem[at + c * stride + r] = x;
  }
}

// acc[i][j] += sum over c < depth of smem[a + c * sa + ty * TM + i] * smem[b + c * sb + tx + TX * j]:
// a register tile of a product of two transposed shared tiles.
void products(uint a, uint sa, uint b, uint sb, uint depth, inout float acc[TM][TN]) {
  [[dont_unroll]] for (uint c = 0; c < depth; ++c) {
    float x[TM], z[TN];
    [[unroll]] for (uint i = 0; i < TM; ++i) x[i] = smem[a + c * sa + ty * TM + i];
    [[unroll]] for (uint j = 0; j < TN; ++j) z[j] = smem[b + c * sb + tx + TX * j];
    [[unroll]] for (uint i = 0; i < TM; ++i) [[unroll]] for (uint j = 0; j < TN; ++j) acc[i][j] += x[i] * z[j];
  }
}

void forward() {
  const uint b = pc.w[B], hq = pc.w[HQ], hkv = pc.w[HKV], sq = pc.w[SQ], sk = pc.w[SK];
  const uint blocks = (sq + BR - 1) / BR, g = flat_group(), bh = g / blocks, q0 = (g % blocks) * BR;
  if (bh >= b * hq) return;  // uniform over the workgroup
  const uint kvh = (bh / hq) * hkv + (bh % hq) / (hq / hkv);
  const float scale = uintBitsToFloat(pc.w[SCALE]);
  const uint QS = 0, KS = QS + D * RP, VS = KS + D * CP, PS = VS + BC * DV, RS = PS + BR * CP;
  load_transposed(QS, RP, bh * sq, q0, BR, sq, D, 0u);
  float m[TM], l[TM], acc[TM][CV];
  [[unroll]] for (uint i = 0; i < TM; ++i) {
    m[i] = MASKED;
    l[i] = 0.0;
    [[unroll]] for (uint j = 0; j < CV; ++j) acc[i][j] = 0.0;
  }
  const uint kend = uint(max(last_key(min(q0 + BR, sq) - 1) + 1, 0));
  for (uint k0 = 0; k0 < kend; k0 += BC) {
    barrier();  // the previous block's tiles are read (and the query tile written)
    load_transposed(KS, CP, kvh * sk, k0, BC, sk, D, 1u);
    for (uint e = tid; e < BC * DV; e += WG) {
      const uint r = e / DV;
      smem[VS + e] = k0 + r < sk ? v_at((kvh * sk + k0) * DV + e) : 0.0;
    }
    barrier();
    float s[TM][TN];
    [[unroll]] for (uint i = 0; i < TM; ++i) [[unroll]] for (uint j = 0; j < TN; ++j) s[i][j] = 0.0;
    products(QS, RP, KS, CP, D, s);
    [[unroll]] for (uint i = 0; i < TM; ++i) {
      const int last = last_key(q0 + ty * TM + i);
      float mx = MASKED;
      [[unroll]] for (uint j = 0; j < TN; ++j) {
        s[i][j] = int(k0 + tx + TX * j) <= last ? s[i][j] * scale : MASKED;
        mx = max(mx, s[i][j]);
      }
      smem[RS + (ty * TM + i) * TX + tx] = mx;
    }
    barrier();
    [[unroll]] for (uint i = 0; i < TM; ++i) {
      float mx = m[i];
      [[unroll]] for (uint t = 0; t < TX; ++t) mx = max(mx, smem[RS + (ty * TM + i) * TX + t]);
      const float corr = exp(m[i] - mx);  // 1 while the row has seen no key (both MASKED)
      m[i] = mx;
      l[i] *= corr;
      [[unroll]] for (uint j = 0; j < CV; ++j) acc[i][j] *= corr;
      [[unroll]] for (uint j = 0; j < TN; ++j) {
        const float p = s[i][j] > VISIBLE ? exp(s[i][j] - mx) : 0.0;
        l[i] += p;
        smem[PS + (ty * TM + i) * CP + tx + TX * j] = p;
      }
    }
    barrier();
    [[dont_unroll]] for (uint c = 0; c < BC; ++c) {
      float p[TM];
      [[unroll]] for (uint i = 0; i < TM; ++i) p[i] = smem[PS + (ty * TM + i) * CP + c];
      [[unroll]] for (uint j = 0; j < CV; ++j) {
        const uint col = tx + TX * j;
        const float x = col < DV ? smem[VS + c * DV + col] : 0.0;
        [[unroll]] for (uint i = 0; i < TM; ++i) acc[i][j] += p[i] * x;
      }
    }
  }
  barrier();
  [[unroll]] for (uint i = 0; i < TM; ++i) smem[RS + (ty * TM + i) * TX + tx] = l[i];
  barrier();
  const uint rows = b * hq * sq;
  [[unroll]] for (uint i = 0; i < TM; ++i) {
    const uint row = q0 + ty * TM + i;
    if (row >= sq) continue;
    float total = 0.0;
    [[unroll]] for (uint t = 0; t < TX; ++t) total += smem[RS + (ty * TM + i) * TX + t];
    const uint r = bh * sq + row;
    [[unroll]] for (uint j = 0; j < CV; ++j) {
      const uint col = tx + TX * j;
      if (col < DV) y[r * DV + col] = total > 0.0 ? acc[i][j] / total : 0.0;
    }
    if (tx == 0u) y[rows * DV + r] = total > 0.0 ? m[i] + log(total) : uintBitsToFloat(NEG_INF_BITS);
  }
}

// dQ_i = scale * sum_j P_ij (dP_ij - (dO_i . O_i - dlse_i)) K_j, P recomputed from lse.
void grad_q() {
  const uint b = pc.w[B], hq = pc.w[HQ], hkv = pc.w[HKV], sq = pc.w[SQ], sk = pc.w[SK];
  const uint blocks = (sq + BR - 1) / BR, g = flat_group(), bh = g / blocks, q0 = (g % blocks) * BR;
  if (bh >= b * hq) return;
  const uint kvh = (bh / hq) * hkv + (bh % hq) / (hq / hkv), rows = b * hq * sq;
  const float scale = uintBitsToFloat(pc.w[SCALE]);
  const uint QS = 0, OS = QS + D * RP, KS = OS + DV * RP, VS = KS + D * CP, PS = VS + DV * CP;
  load_transposed(QS, RP, bh * sq, q0, BR, sq, D, 0u);
  load_transposed(OS, RP, bh * sq, q0, BR, sq, DV, 3u);
  float lse[TM], shift[TM], acc[TM][CD];
  [[unroll]] for (uint i = 0; i < TM; ++i) {
    const uint row = q0 + ty * TM + i, r = bh * sq + min(row, sq - 1);
    lse[i] = packed[rows * DV + r];
    shift[i] = ws[r];
    [[unroll]] for (uint j = 0; j < CD; ++j) acc[i][j] = 0.0;
  }
  const uint kend = uint(max(last_key(min(q0 + BR, sq) - 1) + 1, 0));
  for (uint k0 = 0; k0 < kend; k0 += BC) {
    barrier();
    load_transposed(KS, CP, kvh * sk, k0, BC, sk, D, 1u);
    load_transposed(VS, CP, kvh * sk, k0, BC, sk, DV, 2u);
    barrier();
    float s[TM][TN], dp[TM][TN];
    [[unroll]] for (uint i = 0; i < TM; ++i) [[unroll]] for (uint j = 0; j < TN; ++j) s[i][j] = dp[i][j] = 0.0;
    products(QS, RP, KS, CP, D, s);
    products(OS, RP, VS, CP, DV, dp);
    [[unroll]] for (uint i = 0; i < TM; ++i) {
      const int last = last_key(q0 + ty * TM + i);
      [[unroll]] for (uint j = 0; j < TN; ++j) {
        const bool visible = int(k0 + tx + TX * j) <= last;
        const float p = visible ? exp(scale * s[i][j] - lse[i]) : 0.0;
        smem[PS + (ty * TM + i) * CP + tx + TX * j] = p * (dp[i][j] - shift[i]);
      }
    }
    barrier();
    [[dont_unroll]] for (uint c = 0; c < BC; ++c) {
      float ds[TM];
      [[unroll]] for (uint i = 0; i < TM; ++i) ds[i] = smem[PS + (ty * TM + i) * CP + c];
      [[unroll]] for (uint j = 0; j < CD; ++j) {
        const uint col = tx + TX * j;
        const float x = col < D ? smem[KS + col * CP + c] : 0.0;
        [[unroll]] for (uint i = 0; i < TM; ++i) acc[i][j] += ds[i] * x;
      }
    }
  }
  [[unroll]] for (uint i = 0; i < TM; ++i) {
    const uint row = q0 + ty * TM + i;
    if (row >= sq) continue;
    [[unroll]] for (uint j = 0; j < CD; ++j) {
      const uint col = tx + TX * j;
      if (col < D) y[(bh * sq + row) * D + col] = scale * acc[i][j];
    }
  }
}

// dV_j = sum_i P_ij dO_i and dK_j = scale * sum_i dS_ij Q_i over the query rows of every query
// head that reads key/value head kvh; the tile's rows are keys, its columns queries.
void grad_kv() {
  const uint b = pc.w[B], hq = pc.w[HQ], hkv = pc.w[HKV], sq = pc.w[SQ], sk = pc.w[SK];
  const uint blocks = (sk + BR - 1) / BR, g = flat_group(), kvh = g / blocks, k0 = (g % blocks) * BR;
  if (kvh >= b * hkv) return;
  const uint group = hq / hkv, rows = b * hq * sq;
  const float scale = uintBitsToFloat(pc.w[SCALE]);
  const uint KS = 0, VS = KS + D * RP, QS = VS + DV * RP, OS = QS + D * CP, PS = OS + DV * CP, SS = PS + BR * CP;
  const uint LS = SS + BR * CP, DS = LS + BC;
  load_transposed(KS, RP, kvh * sk, k0, BR, sk, D, 1u);
  load_transposed(VS, RP, kvh * sk, k0, BR, sk, DV, 2u);
  float dk[TM][CD], dv[TM][CV];
  [[unroll]] for (uint i = 0; i < TM; ++i) {
    [[unroll]] for (uint j = 0; j < CD; ++j) dk[i][j] = 0.0;
    [[unroll]] for (uint j = 0; j < CV; ++j) dv[i][j] = 0.0;
  }
  // Queries before first see none of the block's keys.
  const uint first = pc.w[CAUSAL] != 0u ? uint(max(int(k0) - int(sk) + int(sq), 0)) / BC * BC : 0u;
  const uint bh0 = (kvh / hkv) * hq + (kvh % hkv) * group;
  for (uint h = 0; h < group; ++h) {
    const uint bh = bh0 + h;
    for (uint q0 = first; q0 < sq; q0 += BC) {
      barrier();
      load_transposed(QS, CP, bh * sq, q0, BC, sq, D, 0u);
      load_transposed(OS, CP, bh * sq, q0, BC, sq, DV, 3u);
      for (uint e = tid; e < BC; e += WG) {
        const uint r = bh * sq + min(q0 + e, sq - 1);
        smem[LS + e] = packed[rows * DV + r];
        smem[DS + e] = ws[r];
      }
      barrier();
      float s[TM][TN], dp[TM][TN];
      [[unroll]] for (uint i = 0; i < TM; ++i) [[unroll]] for (uint j = 0; j < TN; ++j) s[i][j] = dp[i][j] = 0.0;
      products(KS, RP, QS, CP, D, s);
      products(VS, RP, OS, CP, DV, dp);
      [[unroll]] for (uint i = 0; i < TM; ++i) {
        const int key = int(k0 + ty * TM + i);
        [[unroll]] for (uint j = 0; j < TN; ++j) {
          const uint qq = tx + TX * j, qi = q0 + qq;
          const bool visible = qi < sq && key < int(sk) && key <= last_key(qi);
          const float p = visible ? exp(scale * s[i][j] - smem[LS + qq]) : 0.0;
          smem[PS + (ty * TM + i) * CP + qq] = p;
          smem[SS + (ty * TM + i) * CP + qq] = p * (dp[i][j] - smem[DS + qq]);
        }
      }
      barrier();
      [[dont_unroll]] for (uint c = 0; c < BC; ++c) {
        float p[TM], ds[TM];
        [[unroll]] for (uint i = 0; i < TM; ++i) {
          p[i] = smem[PS + (ty * TM + i) * CP + c];
          ds[i] = smem[SS + (ty * TM + i) * CP + c];
        }
        [[unroll]] for (uint j = 0; j < CV; ++j) {
          const uint col = tx + TX * j;
          const float x = col < DV ? smem[OS + col * CP + c] : 0.0;
          [[unroll]] for (uint i = 0; i < TM; ++i) dv[i][j] += p[i] * x;
        }
        [[unroll]] for (uint j = 0; j < CD; ++j) {
          const uint col = tx + TX * j;
          const float x = col < D ? smem[QS + col * CP + c] : 0.0;
          [[unroll]] for (uint i = 0; i < TM; ++i) dk[i][j] += ds[i] * x;
        }
      }
    }
  }
  const uint dk_at = rows * D, dv_at = dk_at + b * hkv * sk * D;
  [[unroll]] for (uint i = 0; i < TM; ++i) {
    const uint key = k0 + ty * TM + i;
    if (key >= sk) continue;
    const uint r = kvh * sk + key;
    [[unroll]] for (uint j = 0; j < CD; ++j) {
      const uint col = tx + TX * j;
      if (col < D) y[dk_at + r * D + col] = scale * dk[i][j];
    }
    [[unroll]] for (uint j = 0; j < CV; ++j) {
      const uint col = tx + TX * j;
      if (col < DV) y[dv_at + r * DV + col] = dv[i][j];
    }
  }
}

// dO_i . O_i - dlse_i per query row, one invocation each: the softmax's backward shift.
void delta() {
  const uint rows = pc.w[B] * pc.w[HQ] * pc.w[SQ], r = flat_index();
  if (r >= rows) return;
  float s = 0.0;
  for (uint c = 0; c < DV; ++c) s += gpacked[r * DV + c] * packed[r * DV + c];
  ws[r] = s - gpacked[rows * DV + r];
}

void main() {
  tid = gl_LocalInvocationID.x;
  ty = tid / TX;
  tx = tid % TX;
  if (MODE == FORWARD)
    forward();
  else if (MODE == GRAD_Q)
    grad_q();
  else if (MODE == GRAD_KV)
    grad_kv();
  else
    delta();
}
