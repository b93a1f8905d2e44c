#version 450
// Row kernels of the fused ops over the last axis, one workgroup per row with tree reductions
// (or, for short rows, one invocation per row: word SERIAL):
// norm (RMS or layer norm, optional gamma and beta) and softmax_scaled (scale, causal mask,
// softmax). Push words 0-7 are the schedule's (schedule.h, push::kRows...); the backend adds
// f32 copies of the f64 attributes from word 24.
#include "common.glsl"

layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) buffer G { float gamma_[]; };
layout(std430, binding = 2) buffer B { float beta_[]; };
layout(std430, binding = 8) buffer Y { float y[]; };

const uint ROWS = 0, LEN = 1, NORM_GAMMA = 2, NORM_BETA = 3, NORM_CENTER = 4, SOFTMAX_SQ = 2, SOFTMAX_CAUSAL = 3;
const uint MODE = 24, EPS_OR_SCALE = 25, FILL = 26, SERIAL = 27;
const uint NORM = 0, SOFTMAX = 1;

layout(push_constant) uniform P { uint w[32]; } pc;

#include "group.glsl"

float exp_shifted(float v) { return v < -80.0 ? 0.0 : exp(v); }  // as the primitive softmax

void serial_row(uint row) {
  uint len = pc.w[LEN], base = row * len;
  if (pc.w[MODE] == NORM) {
    float mu = 0.0;
    if (pc.w[NORM_CENTER] != 0u) {
      for (uint j = 0; j < len; ++j) mu += x[base + j];
      mu /= float(len);
    }
    float ss = 0.0;
    for (uint j = 0; j < len; ++j) {
      float d = x[base + j] - mu;
      ss += d * d;
    }
    float rstd = 1.0 / sqrt(ss / float(len) + uintBitsToFloat(pc.w[EPS_OR_SCALE]));
    for (uint j = 0; j < len; ++j) {
      float v = (x[base + j] - mu) * rstd;
      if (pc.w[NORM_GAMMA] != 0u) v *= gamma_[j];
      if (pc.w[NORM_BETA] != 0u) v += beta_[j];
      y[base + j] = v;
    }
    return;
  }
  float scale = uintBitsToFloat(pc.w[EPS_OR_SCALE]), fill = uintBitsToFloat(pc.w[FILL]);
  uint sq = pc.w[SOFTMAX_SQ], visible = len;
  if (pc.w[SOFTMAX_CAUSAL] != 0u) visible = min(len, row % sq + (len - sq) + 1);
  float m = visible < len ? fill : uintBitsToFloat(0xff800000u);
  for (uint j = 0; j < visible; ++j) m = max(m, x[base + j] * scale);
  const float masked = exp_shifted(fill - m);
  float s = float(len - visible) * masked;
  for (uint j = 0; j < visible; ++j) s += exp_shifted(x[base + j] * scale - m);
  float inv = 1.0 / s;
  for (uint j = 0; j < len; ++j) y[base + j] = (j < visible ? exp_shifted(x[base + j] * scale - m) : masked) * inv;
}

void main() {
  if (pc.w[SERIAL] != 0u) {
    uint r = flat_index();
    if (r < pc.w[ROWS]) serial_row(r);
    return;
  }
  uint row = flat_group(), lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  if (row >= pc.w[ROWS]) return;  // uniform over the workgroup
  uint len = pc.w[LEN], base = row * len;
  if (pc.w[MODE] == NORM) {
    float mu = 0.0;
    if (pc.w[NORM_CENTER] != 0u) {
      float s = 0.0;
      for (uint j = lid; j < len; j += wg) s += x[base + j];
      mu = group_sum(s) / float(len);
    }
    float ss = 0.0;
    for (uint j = lid; j < len; j += wg) {
      float d = x[base + j] - mu;
      ss += d * d;
    }
    float rstd = 1.0 / sqrt(group_sum(ss) / float(len) + uintBitsToFloat(pc.w[EPS_OR_SCALE]));
    for (uint j = lid; j < len; j += wg) {
      float v = (x[base + j] - mu) * rstd;
      if (pc.w[NORM_GAMMA] != 0u) v *= gamma_[j];
      if (pc.w[NORM_BETA] != 0u) v += beta_[j];
      y[base + j] = v;
    }
    return;
  }
  float scale = uintBitsToFloat(pc.w[EPS_OR_SCALE]), fill = uintBitsToFloat(pc.w[FILL]);
  uint sq = pc.w[SOFTMAX_SQ], visible = len;
  if (pc.w[SOFTMAX_CAUSAL] != 0u) visible = min(len, row % sq + (len - sq) + 1);
  float m = visible < len ? fill : uintBitsToFloat(0xff800000u);
  for (uint j = lid; j < visible; j += wg) m = max(m, x[base + j] * scale);
  m = group_max(m);
  const float masked = exp_shifted(fill - m);
  float s = 0.0;
  for (uint j = lid; j < len; j += wg) s += j < visible ? exp_shifted(x[base + j] * scale - m) : masked;
  float inv = 1.0 / group_sum(s);
  // y may alias x: every read of the row happened before the sums above
  for (uint j = lid; j < len; j += wg) y[base + j] = (j < visible ? exp_shifted(x[base + j] * scale - m) : masked) * inv;
}
