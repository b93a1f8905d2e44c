#version 450
#ifdef SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
// Row kernels of the fused ops over the last axis (word SERIAL says how a row is spread):
// one workgroup per row with tree reductions, one invocation per row (short rows), or, in the
// SUBGROUP variant, one subgroup per row with subgroup arithmetic (short rows, coalesced):
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
const uint BY_WORKGROUP = 0, BY_INVOCATION = 1, BY_SUBGROUP = 2;

layout(push_constant) uniform P { uint w[32]; } pc;

#include "group.glsl"

float exp_shifted(float v) { return v < -80.0 ? 0.0 : exp(v); }  // as the primitive softmax

// A reduction over the invocations sharing a row (uniform `how` over the workgroup).
float row_reduce(float v, bool is_max, uint how) {
#ifdef SUBGROUP
  if (how == BY_SUBGROUP) return is_max ? subgroupMax(v) : subgroupAdd(v);
#endif
  return how == BY_WORKGROUP ? group_reduce(v, is_max) : v;
}

// Row `row`, its elements lane, lane + step, ... walked by this invocation.
void row_of(uint row, uint lane, uint step, uint how) {
  uint len = pc.w[LEN], base = row * len;
  if (pc.w[MODE] == NORM) {
    float mu = 0.0;
    if (pc.w[NORM_CENTER] != 0u) {
      float s = 0.0;
      for (uint j = lane; j < len; j += step) s += x[base + j];
      mu = row_reduce(s, false, how) / float(len);
    }
    float ss = 0.0;
    for (uint j = lane; j < len; j += step) {
      float d = x[base + j] - mu;
      ss += d * d;
    }
    float rstd = 1.0 / sqrt(row_reduce(ss, false, how) / float(len) + uintBitsToFloat(pc.w[EPS_OR_SCALE]));
    for (uint j = lane; j < len; j += step) {
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
  float m = visible < len ? fill : LOWEST;
  for (uint j = lane; j < visible; j += step) m = max(m, x[base + j] * scale);
  m = row_reduce(m, true, how);
  const float masked = exp_shifted(fill - m);
  float s = 0.0;
  for (uint j = lane; j < len; j += step) s += j < visible ? exp_shifted(x[base + j] * scale - m) : masked;
  float inv = 1.0 / row_reduce(s, false, how);
  // y may alias x: every read of the row happened before the sums above
  for (uint j = lane; j < len; j += step) y[base + j] = (j < visible ? exp_shifted(x[base + j] * scale - m) : masked) * inv;
}

void main() {
  const uint how = pc.w[SERIAL], rows = pc.w[ROWS];
  if (how == BY_INVOCATION) {
    uint r = flat_index();
    if (r < rows) row_of(r, 0, 1, how);
    return;
  }
#ifdef SUBGROUP
  if (how == BY_SUBGROUP) {
    uint r = flat_group() * gl_NumSubgroups + gl_SubgroupID;
    if (r < rows) row_of(r, gl_SubgroupInvocationID, gl_SubgroupSize, how);
    return;
  }
#endif
  uint r = flat_group();
  if (r >= rows) return;  // uniform over the workgroup
  row_of(r, gl_LocalInvocationID.x, gl_WorkGroupSize.x, how);
}
