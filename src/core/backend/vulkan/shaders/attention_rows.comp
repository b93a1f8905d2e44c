#version 450
// Attention for CPU-emulated devices, the same modes, push words and packed layout as
// attention.comp: one query row (FORWARD, GRAD_Q) or key row (GRAD_KV) per invocation, a
// workgroup a block of rows of one head, the other side walked in lockstep (each row's walk
// stops at its last visible key). Every load of the other side is then one address for all of
// a workgroup's invocations: a broadcast on a SIMD CPU, where shared-memory tiles cost a
// gather per lane. The other side comes in chunks
// [FIRST, LAST), one launch each, so that no invocation's loops pass the loop budget; an
// invocation's running state passes from one launch to the next through the output (the
// unnormalised output, dQ, dK and dV) and the workspace (the forward's row maximum and sum).
// GRAD_Q and GRAD_KV recompute the probabilities from the saved log-sum-exp and the DELTA
// launch's dO . O - dlse (attention.comp computes it, ahead of the workspace's other use).
#include "common.glsl"

layout(constant_id = 1) const uint D = 64;   // query and key head dimension
layout(constant_id = 2) const uint DV = 64;  // value head dimension
layout(constant_id = 5) const uint MODE = 0;

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
// 16-bit q, k and v (half.glsl), the forward's only: formats in HALF's bits 0-1, 2-3 and 4-5.
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
layout(std430, binding = 5) buffer W { float ws[]; };  // backward: dO . O - dlse per row; forward: max, sum
layout(std430, binding = 8) buffer Y { float y[]; };

const uint B = 0, HQ = 1, HKV = 2, SQ = 3, SK = 4;
const uint SCALE = 25, CAUSAL = 26, FIRST = 27, LAST = 28, FLAGS = 29;
const uint FORWARD = 0, GRAD_Q = 1, GRAD_KV = 2;
const uint FIRST_CHUNK = 1, LAST_CHUNK = 2;
const float MASKED = -1.0e30;

layout(push_constant) uniform P { uint w[32]; } pc;

// The causal diagonal's shift: query i sees key j when j <= i + shift (any key when not causal).
int shift_of() { return pc.w[CAUSAL] != 0u ? int(pc.w[SK]) - int(pc.w[SQ]) : int(pc.w[SK]); }
bool first_chunk() { return (pc.w[FLAGS] & FIRST_CHUNK) != 0u; }
bool last_chunk() { return (pc.w[FLAGS] & LAST_CHUNK) != 0u; }

// The workgroup's block of rows of one head: the head, the block's first row, this row.
uvec3 block_of(uint len) {
  const uint blocks = (len + gl_WorkGroupSize.x - 1) / gl_WorkGroupSize.x, g = flat_group();
  const uint i0 = (g % blocks) * gl_WorkGroupSize.x;
  return uvec3(g / blocks, i0, i0 + gl_LocalInvocationID.x);
}

void forward() {
  const uint b = pc.w[B], hq = pc.w[HQ], hkv = pc.w[HKV], sq = pc.w[SQ], sk = pc.w[SK];
  const uvec3 blk = block_of(sq);
  const uint bh = blk.x, i = blk.z, rows = b * hq * sq;
  if (bh >= b * hq) return;
  const uint kv = (bh / hq) * hkv + (bh % hq) / (hq / hkv), r = bh * sq + min(i, sq - 1);
  const float scale = uintBitsToFloat(pc.w[SCALE]);
  const int last = min(int(i) + shift_of(), int(sk) - 1);
  float qi[D], acc[DV];
  for (uint c = 0; c < D; ++c) qi[c] = scale * q_at(r * D + c);
  float m = MASKED, l = 0.0;
  if (first_chunk()) {
    for (uint c = 0; c < DV; ++c) acc[c] = 0.0;
  } else {
    for (uint c = 0; c < DV; ++c) acc[c] = y[r * DV + c];
    m = ws[r];
    l = ws[rows + r];
  }
  const uint kend = uint(clamp(last + 1, int(pc.w[FIRST]), int(pc.w[LAST])));
  for (uint j = pc.w[FIRST]; j < kend; ++j) {
    const uint kj = kv * sk + j;
    float s = 0.0;
    for (uint c = 0; c < D; ++c) s += qi[c] * k_at(kj * D + c);
    const bool visible = int(j) <= last;
    if (visible && s > m) {  // a new maximum: rescale what was summed so far
      const float corr = exp(m - s);
      l *= corr;
      for (uint c = 0; c < DV; ++c) acc[c] *= corr;
      m = s;
    }
    const float p = visible ? exp(s - m) : 0.0;
    l += p;
    for (uint c = 0; c < DV; ++c) acc[c] += p * v_at(kj * DV + c);
  }
  if (i >= sq) return;
  if (!last_chunk()) {
    for (uint c = 0; c < DV; ++c) y[r * DV + c] = acc[c];
    ws[r] = m;
    ws[rows + r] = l;
    return;
  }
  for (uint c = 0; c < DV; ++c) y[r * DV + c] = l > 0.0 ? acc[c] / l : 0.0;
  y[rows * DV + r] = l > 0.0 ? m + log(l) : uintBitsToFloat(NEG_INF_BITS);
}

// dQ_i = scale * sum_j P_ij (dP_ij - (dO_i . O_i - dlse_i)) K_j.
void grad_q() {
  const uint b = pc.w[B], hq = pc.w[HQ], hkv = pc.w[HKV], sq = pc.w[SQ], sk = pc.w[SK];
  const uvec3 blk = block_of(sq);
  const uint bh = blk.x, i = blk.z, rows = b * hq * sq;
  if (bh >= b * hq) return;
  const uint kv = (bh / hq) * hkv + (bh % hq) / (hq / hkv), r = bh * sq + min(i, sq - 1);
  const float scale = uintBitsToFloat(pc.w[SCALE]), lse = packed[rows * DV + r], shift = ws[r];
  const int last = min(int(i) + shift_of(), int(sk) - 1);
  float qi[D], go[DV], acc[D];
  for (uint c = 0; c < D; ++c) {
    qi[c] = scale * q_at(r * D + c);
    acc[c] = first_chunk() ? 0.0 : y[r * D + c];
  }
  for (uint c = 0; c < DV; ++c) go[c] = gpacked[r * DV + c];
  const uint kend = uint(clamp(last + 1, int(pc.w[FIRST]), int(pc.w[LAST])));
  for (uint j = pc.w[FIRST]; j < kend; ++j) {
    const uint kj = kv * sk + j;
    float s = 0.0, dp = 0.0;
    for (uint c = 0; c < D; ++c) s += qi[c] * k_at(kj * D + c);
    for (uint c = 0; c < DV; ++c) dp += go[c] * v_at(kj * DV + c);
    const float ds = int(j) <= last ? scale * exp(s - lse) * (dp - shift) : 0.0;
    for (uint c = 0; c < D; ++c) acc[c] += ds * k_at(kj * D + c);
  }
  if (i >= sq) return;
  for (uint c = 0; c < D; ++c) y[r * D + c] = acc[c];
}

// dV_j = sum_i P_ij dO_i and dK_j = scale * sum_i dS_ij Q_i over the chunk's query rows of
// every query head that reads key/value head kvh.
void grad_kv() {
  const uint b = pc.w[B], hq = pc.w[HQ], hkv = pc.w[HKV], sq = pc.w[SQ], sk = pc.w[SK];
  const uvec3 blk = block_of(sk);
  const uint kvh = blk.x, j = blk.z;
  if (kvh >= b * hkv) return;
  const uint group = hq / hkv, rows = b * hq * sq, kj = kvh * sk + min(j, sk - 1);
  const uint dk_at = rows * D + kj * D, dv_at = rows * D + b * hkv * sk * D + kj * DV;
  const float scale = uintBitsToFloat(pc.w[SCALE]);
  float kr[D], vr[DV], dk[D], dv[DV];
  for (uint c = 0; c < D; ++c) {
    kr[c] = scale * k_at(kj * D + c);
    dk[c] = first_chunk() ? 0.0 : y[dk_at + c];
  }
  for (uint c = 0; c < DV; ++c) {
    vr[c] = v_at(kj * DV + c);
    dv[c] = first_chunk() ? 0.0 : y[dv_at + c];
  }
  // Query rows before the block's first key's first viewer see none of its keys.
  const uint first = max(pc.w[FIRST], uint(clamp(int(blk.y) - shift_of(), 0, int(sq))));
  const uint bh0 = (kvh / hkv) * hq + (kvh % hkv) * group;
  for (uint h = 0; h < group; ++h) {
    for (uint i = first; i < pc.w[LAST]; ++i) {
      const uint r = (bh0 + h) * sq + i;
      float s = 0.0, dp = 0.0;
      for (uint c = 0; c < D; ++c) s += kr[c] * q_at(r * D + c);
      for (uint c = 0; c < DV; ++c) dp += vr[c] * gpacked[r * DV + c];
      const bool visible = j < sk && int(j) <= int(i) + shift_of();
      const float p = visible ? exp(s - packed[rows * DV + r]) : 0.0, ds = scale * p * (dp - ws[r]);
      for (uint c = 0; c < DV; ++c) dv[c] += p * gpacked[r * DV + c];
      for (uint c = 0; c < D; ++c) dk[c] += ds * q_at(r * D + c);
    }
  }
  if (j >= sk) return;
  for (uint c = 0; c < D; ++c) y[dk_at + c] = dk[c];
  for (uint c = 0; c < DV; ++c) y[dv_at + c] = dv[c];
}

void main() {
  if (MODE == FORWARD)
    forward();
  else if (MODE == GRAD_Q)
    grad_q();
  else
    grad_kv();
}
