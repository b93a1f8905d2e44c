#version 450
// Rotary position embedding, causal masking and the learning-rate schedule.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };

const uint ROPE = 0, CAUSAL_MASK = 1, LR_SCHEDULE = 2;

layout(push_constant) uniform P {
  uint n, op, dim, seq;       // rope: n = rows * half; mask: dim = keys, seq = queries
  float theta_log2, sign, fill, pad0;
  float base_lr, min_lr;
  int warmup, total;
} pc;

void main() {
  uint i = flat_index();
  if (i >= pc.n) return;
  if (pc.op == ROPE) {
    uint half_ = pc.dim / 2, row = i / half_, p = i % half_;
    float pos = float(row % pc.seq);
    // theta^(-2p/dim) = 2^(-2p/dim * log2(theta))
    float angle = pc.sign * pos * exp2(-2.0 * float(p) / float(pc.dim) * pc.theta_log2);
    float c = cos(angle), s = sin(angle);
    uint o = row * pc.dim + p;
    float x1 = x[o], x2 = x[o + half_];
    y[o] = x1 * c - x2 * s;
    y[o + half_] = x2 * c + x1 * s;
  } else if (pc.op == CAUSAL_MASK) {
    uint j = i % pc.dim, q = (i / pc.dim) % pc.seq;
    y[i] = int(j) > int(q) + int(pc.dim) - int(pc.seq) ? pc.fill : x[i];
  } else {
    float t = x[0] + 1.0;
    float lr = pc.base_lr;
    if (pc.warmup > 0 && t <= float(pc.warmup)) {
      lr = pc.base_lr * t / float(pc.warmup);
    } else if (pc.total > 0) {
      float progress = min(1.0, (t - float(pc.warmup)) / float(pc.total - pc.warmup));
      lr = pc.min_lr + (pc.base_lr - pc.min_lr) * 0.5 * (1.0 + cos(3.14159265358979 * progress));
    }
    y[0] = lr;
  }
}
