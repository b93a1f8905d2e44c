#version 450
// Softmax and log-softmax along one axis: one workgroup per row (outer x inner), tree
// reductions for the maximum and the sum of exponentials.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };

layout(push_constant) uniform P {
  uint rows, len, inner, log_form;
} pc;

shared float partial[gl_WorkGroupSize.x];

float tree(float v, bool is_max) {
  partial[gl_LocalInvocationID.x] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (gl_LocalInvocationID.x < s) {
      float u = partial[gl_LocalInvocationID.x + s];
      partial[gl_LocalInvocationID.x] = is_max ? max(partial[gl_LocalInvocationID.x], u) : partial[gl_LocalInvocationID.x] + u;
    }
    barrier();
  }
  float r = partial[0];
  barrier();
  return r;
}

void main() {
  uint r = flat_group();
  if (r >= pc.rows) return;
  uint base = (r / pc.inner) * pc.len * pc.inner + r % pc.inner;
  float m = LOWEST;
  for (uint j = gl_LocalInvocationID.x; j < pc.len; j += gl_WorkGroupSize.x) m = max(m, x[base + j * pc.inner]);
  m = tree(m, true);
  float s = 0.0;
  for (uint j = gl_LocalInvocationID.x; j < pc.len; j += gl_WorkGroupSize.x) {
    float d = x[base + j * pc.inner] - m;
    s += d < -80.0 ? 0.0 : exp(d);  // masked scores contribute nothing
  }
  s = tree(s, false);
  if (pc.log_form != 0) {
    float lse = m + log(s);
    for (uint j = gl_LocalInvocationID.x; j < pc.len; j += gl_WorkGroupSize.x) y[base + j * pc.inner] = x[base + j * pc.inner] - lse;
  } else {
    float inv = 1.0 / s;
    for (uint j = gl_LocalInvocationID.x; j < pc.len; j += gl_WorkGroupSize.x) {
      float d = x[base + j * pc.inner] - m;
      y[base + j * pc.inner] = (d < -80.0 ? 0.0 : exp(d)) * inv;
    }
  }
}
