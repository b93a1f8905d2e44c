#version 450
#ifdef SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
// Sum, mean and max over any set of axes: one workgroup per output element, each invocation
// accumulates a strided share with Kahan compensation, then a shared-memory tree combines the
// partial results (pairwise, so error grows with log n rather than n). Long reductions split
// into `chunks` pieces: a workgroup per (output, piece) writes its partial result to the
// workspace, then a workgroup per output combines them. Short reductions over many outputs:
// one invocation per output, or in the SUBGROUP variant one subgroup per output (coalesced
// lanes, compensated per lane, then subgroup arithmetic).
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(std430, binding = 2) buffer W { float ws[]; };  // partial results of the pieces

const uint WORKGROUP = 0, SERIAL = 1, PARTIAL = 2, COMBINE = 3, BY_SUBGROUP = 4;

layout(push_constant) uniform P {
  uint outputs, count, is_max, is_mean;
  uint keep_rank, red_rank, mode, chunks;  // SERIAL: one invocation per output (short reductions)
  uint keep_shape[6];
  uint keep_stride[6];
  uint red_shape[6];
  uint red_stride[6];
} pc;

shared float partial[gl_WorkGroupSize.x];

uint base_of(uint o) {
  uint base = 0, rem = o;
  for (int k = int(pc.keep_rank) - 1; k >= 0; --k) {
    base += (rem % pc.keep_shape[k]) * pc.keep_stride[k];
    rem /= pc.keep_shape[k];
  }
  return base;
}

float tree(float v) {
  partial[gl_LocalInvocationID.x] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (gl_LocalInvocationID.x < s) {
      float u = partial[gl_LocalInvocationID.x + s];
      partial[gl_LocalInvocationID.x] = pc.is_max != 0 ? max(partial[gl_LocalInvocationID.x], u) : partial[gl_LocalInvocationID.x] + u;
    }
    barrier();
  }
  return partial[0];
}

void main() {
  const bool serial = pc.mode == SERIAL, by_subgroup = pc.mode == BY_SUBGROUP;
  const uint chunks = pc.mode == PARTIAL || pc.mode == COMBINE ? pc.chunks : 1u;
  uint g = serial ? flat_index() : flat_group(), lane = serial ? 0 : gl_LocalInvocationID.x;
  uint step = serial ? 1 : gl_WorkGroupSize.x;
#ifdef SUBGROUP
  if (by_subgroup) g = flat_group() * gl_NumSubgroups + gl_SubgroupID, lane = gl_SubgroupInvocationID, step = gl_SubgroupSize;
#endif
  const uint o = pc.mode == COMBINE ? g : g / chunks, piece = g % chunks;  // COMBINE: a workgroup per output
  if (o >= pc.outputs) return;  // uniform per workgroup (or subgroup); serial has no barriers
  if (pc.mode == COMBINE) {
    float v = pc.is_max != 0 ? LOWEST : 0.0;
    for (uint c = gl_LocalInvocationID.x; c < chunks; c += gl_WorkGroupSize.x) {
      v = pc.is_max != 0 ? max(v, ws[o * chunks + c]) : v + ws[o * chunks + c];
    }
    v = tree(v);
    if (gl_LocalInvocationID.x == 0) y[o] = pc.is_mean != 0 ? v / float(pc.count) : v;
    return;
  }
  uint base = base_of(o);
  const uint span = (pc.count + chunks - 1) / chunks, first = piece * span, last = min(pc.count, first + span);
  precise float acc = pc.is_max != 0 ? LOWEST : 0.0, comp = 0.0;
  for (uint j = first + lane; j < last; j += step) {
    uint off = base, r = j;
    for (int k = int(pc.red_rank) - 1; k >= 0; --k) {
      off += (r % pc.red_shape[k]) * pc.red_stride[k];
      r /= pc.red_shape[k];
    }
    float v = x[off];
    if (pc.is_max != 0) {
      acc = max(acc, v);
    } else {
      precise float t = v - comp, s = acc + t;
      comp = (s - acc) - t;
      acc = s;
    }
  }
  if (serial) {
    y[o] = pc.is_mean != 0 ? acc / float(pc.count) : acc;
    return;
  }
#ifdef SUBGROUP
  if (by_subgroup) {
    const float r = pc.is_max != 0 ? subgroupMax(acc) : subgroupAdd(acc);
    if (subgroupElect()) y[o] = pc.is_mean != 0 ? r / float(pc.count) : r;
    return;
  }
#endif
  acc = tree(acc);
  if (gl_LocalInvocationID.x != 0) return;
  if (pc.mode == PARTIAL)
    ws[g] = acc;
  else
    y[o] = pc.is_mean != 0 ? acc / float(pc.count) : acc;
}
