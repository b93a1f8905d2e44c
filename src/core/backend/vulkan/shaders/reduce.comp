#version 450
// Sum, mean and max over any set of axes: one workgroup per output element, each invocation
// accumulates a strided share with Kahan compensation, then a shared-memory tree combines the
// partial results (pairwise, so error grows with log n rather than n).
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };

layout(push_constant) uniform P {
  uint outputs, count, is_max, is_mean;
  uint keep_rank, red_rank, serial, pad1;  // serial: one invocation per output (short reductions)
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

void main() {
  const bool serial = pc.serial != 0;
  uint o = serial ? flat_index() : flat_group();
  if (o >= pc.outputs) return;  // uniform per workgroup unless serial (which has no barriers)
  uint base = base_of(o);
  float acc = pc.is_max != 0 ? -1.0 / 0.0 : 0.0, comp = 0.0;
  const uint first = serial ? 0 : gl_LocalInvocationID.x, step = serial ? 1 : gl_WorkGroupSize.x;
  for (uint j = first; j < pc.count; j += step) {
    uint off = base, r = j;
    for (int k = int(pc.red_rank) - 1; k >= 0; --k) {
      off += (r % pc.red_shape[k]) * pc.red_stride[k];
      r /= pc.red_shape[k];
    }
    float v = x[off];
    if (pc.is_max != 0) {
      acc = max(acc, v);
    } else {
      float t = v - comp, s = acc + t;
      comp = (s - acc) - t;
      acc = s;
    }
  }
  if (serial) {
    y[o] = pc.is_mean != 0 ? acc / float(pc.count) : acc;
    return;
  }
  partial[gl_LocalInvocationID.x] = acc;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (gl_LocalInvocationID.x < s) {
      float u = partial[gl_LocalInvocationID.x + s];
      partial[gl_LocalInvocationID.x] = pc.is_max != 0 ? max(partial[gl_LocalInvocationID.x], u) : partial[gl_LocalInvocationID.x] + u;
    }
    barrier();
  }
  if (gl_LocalInvocationID.x == 0) {
    float r = partial[0];
    y[o] = pc.is_mean != 0 ? r / float(pc.count) : r;
  }
}
