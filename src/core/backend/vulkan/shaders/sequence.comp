#version 450
// Rotary position embedding, causal masking and the optimizer's scalars: the learning-rate
// schedule, Adam's bias correction and the step counter.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };

const uint ROPE = 0, CAUSAL_MASK = 1, LR_SCHEDULE = 2, BIAS_CORRECTION = 3, INCREMENT = 4;

layout(push_constant) uniform P {
  uint n, op, dim, seq;       // rope: n = rows * half; mask: dim = keys, seq = queries
  float theta_log2, sign, fill, pad0;  // rope: fill = 1 / factor, pad0 = smooth_a
  float base_lr, min_lr;               // rope: base_lr = smooth_b
  int warmup, total;
  uint counter_i32;           // the step counter is i32 (else f32)
  float ln_beta, power;       // bias correction: ln(beta) from the host in double; 0 when beta = 0
} pc;

// The step being taken, counting from 1.
float step_taken() { return (pc.counter_i32 != 0 ? float(floatBitsToInt(x[0])) : x[0]) + 1.0; }

// e^v - 1 without cancellation near 0: a Taylor series where e^v is close to 1, where exp's
// error (a few ulp of a value near 1) would be all of the result.
float expm1_(float v) {
  if (abs(v) >= 0.25) return exp(v) - 1.0;
  float term = v, sum = v;
  for (int k = 2; k <= 9; ++k) {
    term *= v / float(k);
    sum += term;
  }
  return sum;
}

void main() {
  uint i = flat_index();
  if (i >= pc.n) return;
  if (pc.op == ROPE) {
    uint half_ = pc.dim / 2, row = i / half_, p = i % half_;
    float pos = float(row % pc.seq);
    // theta^(-2p/dim) = 2^(-2p/dim * log2(theta))
    float f = exp2(-2.0 * float(p) / float(pc.dim) * pc.theta_log2);
    // Scaling (rope_frequency in ops/rope.cpp): linear when smooth_a = smooth_b = 0.
    f *= mix(pc.fill, 1.0, clamp(pc.pad0 * f - pc.base_lr, 0.0, 1.0));
    float angle = pc.sign * pos * f;
    float c = cos(angle), s = sin(angle);
    uint o = row * pc.dim + p;
    float x1 = x[o], x2 = x[o + half_];
    y[o] = x1 * c - x2 * s;
    y[o + half_] = x2 * c + x1 * s;
  } else if (pc.op == CAUSAL_MASK) {
    uint j = i % pc.dim, q = (i / pc.dim) % pc.seq;
    y[i] = int(j) > int(q) + int(pc.dim) - int(pc.seq) ? pc.fill : x[i];
  } else if (pc.op == BIAS_CORRECTION) {
    // (1 - beta^t)^power with 1 - beta^t = -expm1(t ln beta); power is -1 or -0.5 for Adam.
    float c = pc.ln_beta == 0.0 ? 1.0 : -expm1_(step_taken() * pc.ln_beta);
    y[0] = pc.power == -1.0 ? 1.0 / c : pc.power == -0.5 ? inversesqrt(c) : pow(c, pc.power);
  } else if (pc.op == INCREMENT) {
    // Saturates at 2^31 - 1 (a shader cannot fail): two billion steps are out of reach.
    int n = floatBitsToInt(x[0]);
    y[0] = intBitsToFloat(n == 0x7fffffff ? n : n + 1);
  } else {
    float t = step_taken();
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
