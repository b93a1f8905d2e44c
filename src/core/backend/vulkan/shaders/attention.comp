#version 450
// Attention without a score matrix: the forward keeps an online softmax per query row and
// saves the row's log-sum-exp next to the output (the packed layout of attention_fused); the
// backward recomputes each probability from it. dQ: one invocation per query row. dK and dV:
// one invocation per key row, walking every query of its key/value head's group, so the
// accumulation needs neither atomics nor a second pass. Push words 0-6 are the schedule's
// (b, hq, hkv, sq, sk, d, dv); the backend adds the mode, the scale and the causal flag. The
// workgroup's invocations read the same key row at the same time, which real GPUs serve as
// one broadcast load.
#include "common.glsl"

// Head dimensions (d and dv) up to DH: registers per invocation.
layout(constant_id = 1) const uint DH = 64;

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer O { float packed[]; };   // out, then lse
layout(std430, binding = 4) readonly buffer G { float gpacked[]; };  // their gradients
layout(std430, binding = 8) writeonly buffer Y { float y[]; };

const uint B = 0, HQ = 1, HKV = 2, SQ = 3, SK = 4, D = 5, DV = 6;
const uint MODE = 24, SCALE = 25, CAUSAL = 26;
const uint FORWARD = 0, GRAD_Q = 1, GRAD_KV = 2;

layout(push_constant) uniform P { uint w[32]; } pc;

// Keys a query row may see: j <= i + (sk - sq) when causal (the diagonal ends at the last key).
int last_key(uint i) { return pc.w[CAUSAL] != 0u ? min(int(i) + int(pc.w[SK]) - int(pc.w[SQ]), int(pc.w[SK]) - 1) : int(pc.w[SK]) - 1; }

void main() {
  const uint b = pc.w[B], hq = pc.w[HQ], hkv = pc.w[HKV], sq = pc.w[SQ], sk = pc.w[SK], d = pc.w[D], dv = pc.w[DV];
  const uint group = hq / hkv, rows = b * hq * sq;
  const float scale = uintBitsToFloat(pc.w[SCALE]);
  const uint mode = pc.w[MODE];
  uint idx = flat_index();
  if (mode == GRAD_KV) {
    if (idx >= b * hkv * sk) return;
    const uint kvh = idx / sk, j = idx % sk, bb = kvh / hkv, hk = kvh % hkv;
    float kj[DH], vj[DH], dk[DH], dvj[DH];
    for (uint c = 0; c < d; ++c) { kj[c] = k[idx * d + c]; dk[c] = 0.0; }
    for (uint c = 0; c < dv; ++c) { vj[c] = v[idx * dv + c]; dvj[c] = 0.0; }
    const uint first = pc.w[CAUSAL] != 0u ? uint(max(int(j) - int(sk) + int(sq), 0)) : 0u;
    for (uint h = hk * group; h < (hk + 1) * group; ++h) {
      for (uint i = first; i < sq; ++i) {
        const uint r = (bb * hq + h) * sq + i;
        float s = 0.0, dp = 0.0, delta = 0.0;
        for (uint c = 0; c < d; ++c) s += q[r * d + c] * kj[c];
        for (uint c = 0; c < dv; ++c) {
          float go = gpacked[r * dv + c];
          dp += go * vj[c];
          delta += go * packed[r * dv + c];  // sum_j P dP = dO . O
        }
        const float p = exp(scale * s - packed[rows * dv + r]);
        const float ds = p * (dp - delta + gpacked[rows * dv + r]);
        for (uint c = 0; c < dv; ++c) dvj[c] += p * gpacked[r * dv + c];
        for (uint c = 0; c < d; ++c) dk[c] += scale * ds * q[r * d + c];
      }
    }
    const uint dk_at = rows * d + idx * d, dv_at = rows * d + b * hkv * sk * d + idx * dv;
    for (uint c = 0; c < d; ++c) y[dk_at + c] = dk[c];
    for (uint c = 0; c < dv; ++c) y[dv_at + c] = dvj[c];
    return;
  }
  if (idx >= rows) return;
  const uint i = idx % sq, bh = idx / sq, kv = (bh / hq) * hkv + (bh % hq) / group;
  const int last = last_key(i);
  float qi[DH], acc[DH];
  for (uint c = 0; c < d; ++c) { qi[c] = q[idx * d + c]; acc[c] = 0.0; }
  if (mode == FORWARD) {
    for (uint c = 0; c < dv; ++c) acc[c] = 0.0;
    float m = 0.0, l = 0.0;
    for (int jj = 0; jj <= last; ++jj) {
      const uint j = kv * sk + uint(jj);
      float s = 0.0;
      for (uint c = 0; c < d; ++c) s += qi[c] * k[j * d + c];
      s *= scale;
      if (l == 0.0 || s > m) {  // a new maximum: rescale what was summed so far
        const float corr = l == 0.0 ? 0.0 : exp(m - s);
        l *= corr;
        for (uint c = 0; c < dv; ++c) acc[c] *= corr;
        m = s;
      }
      const float p = exp(s - m);
      l += p;
      for (uint c = 0; c < dv; ++c) acc[c] += p * v[j * dv + c];
    }
    for (uint c = 0; c < dv; ++c) y[idx * dv + c] = l > 0.0 ? acc[c] / l : 0.0;
    y[rows * dv + idx] = l > 0.0 ? m + log(l) : uintBitsToFloat(0xff800000u);
    return;
  }
  // GRAD_Q: dQ_i = scale * sum_j P_ij (dP_ij - (dO_i . O_i - dlse_i)) K_j
  float delta = 0.0;
  for (uint c = 0; c < dv; ++c) delta += gpacked[idx * dv + c] * packed[idx * dv + c];
  const float shift = delta - gpacked[rows * dv + idx], lse = packed[rows * dv + idx];
  for (int jj = 0; jj <= last; ++jj) {
    const uint j = kv * sk + uint(jj);
    float s = 0.0, dp = 0.0;
    for (uint c = 0; c < d; ++c) s += qi[c] * k[j * d + c];
    for (uint c = 0; c < dv; ++c) dp += gpacked[idx * dv + c] * v[j * dv + c];
    const float ds = exp(scale * s - lse) * (dp - shift);
    for (uint c = 0; c < d; ++c) acc[c] += scale * ds * k[j * d + c];
  }
  for (uint c = 0; c < d; ++c) y[idx * d + c] = acc[c];
}
