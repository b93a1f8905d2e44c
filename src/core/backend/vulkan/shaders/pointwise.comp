#version 450
// Unary and binary elementwise ops with broadcasting; the op is a push constant so that one
// pipeline serves the whole family (fewer pipelines, faster cold start). Values travel as raw
// 32-bit words so the same kernel casts between f32 and i32.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer B { uint b[]; };
layout(std430, binding = 2) writeonly buffer Y { uint y[]; };

// Op codes (kept in sync with lowering.cpp).
const uint COPY = 0, NEG = 1, EXP = 2, LOG = 3, SQRT = 4, RSQRT = 5, ABS = 6, TANH = 7, SIGMOID = 8,
           RELU = 9, GELU_TANH = 10, GELU_ERF = 11, SILU = 12, AFFINE = 13, SIGN = 14, POS_MASK = 15,
           GELU_TANH_GRAD = 16, GELU_ERF_GRAD = 17, CLIP_COEF = 18, F32_TO_I32 = 19, I32_TO_F32 = 20,
           ADD = 32, SUB = 33, MUL = 34, DIV = 35, EQUAL = 36;

layout(push_constant) uniform P {
  uint n, op, rank, contiguous;
  float p0, p1;
  uint shape[6];
  uint sa[6];
  uint sb[6];
} pc;

const float SQRT_2_OVER_PI = 0.7978845608028654, INV_SQRT2 = 0.7071067811865476, INV_SQRT_2PI = 0.3989422804014327;

// erf by Abramowitz-Stegun 7.1.26 refined: |error| < 1.5e-7, below f32 resolution near 1.
float erf_approx(float x) {
  float s = sign(x), t = abs(x);
  float k = 1.0 / (1.0 + 0.3275911 * t);
  float poly = k * (0.254829592 + k * (-0.284496736 + k * (1.421413741 + k * (-1.453152027 + k * 1.061405429))));
  return s * (1.0 - poly * exp(-t * t));
}

float stable_tanh(float x) {
  // GLSL tanh overflows in some drivers for |x| > ~44; tanh saturates long before.
  return tanh(clamp(x, -20.0, 20.0));
}

float unary(float x) {
  switch (pc.op) {
    case COPY: return x;
    case NEG: return -x;
    case EXP: return exp(x);
    case LOG: return log(x);
    case SQRT: return sqrt(x);
    case RSQRT: return 1.0 / sqrt(x);
    case ABS: return abs(x);
    case TANH: return stable_tanh(x);
    case SIGMOID: return 1.0 / (1.0 + exp(-x));
    case RELU: return x > 0.0 ? x : 0.0;
    case GELU_TANH: return 0.5 * x * (1.0 + stable_tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)));
    case GELU_ERF: return 0.5 * x * (1.0 + erf_approx(x * INV_SQRT2));
    case SILU: return x / (1.0 + exp(-x));
    case AFFINE: return pc.p0 * x + pc.p1;
    case SIGN: return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0);
    case POS_MASK: return x > 0.0 ? 1.0 : 0.0;
    case GELU_TANH_GRAD: {
      float t = stable_tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x));
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x);
    }
    case GELU_ERF_GRAD: return 0.5 * (1.0 + erf_approx(x * INV_SQRT2)) + x * INV_SQRT_2PI * exp(-0.5 * x * x);
    case CLIP_COEF: return min(1.0, pc.p0 / (x + 1e-6));
  }
  return x;
}

float binary(float x, float z) {
  switch (pc.op) {
    case ADD: return x + z;
    case SUB: return x - z;
    case MUL: return x * z;
    case DIV: return x / z;
    case EQUAL: return x == z ? 1.0 : 0.0;
  }
  return x;
}

void main() {
  uint i = flat_index();
  if (i >= pc.n) return;
  if (pc.op < ADD) {
    uint w = a[i];
    if (pc.op == F32_TO_I32) y[i] = uint(int(trunc(uintBitsToFloat(w))));
    else if (pc.op == I32_TO_F32) y[i] = floatBitsToUint(float(int(w)));
    else y[i] = floatBitsToUint(unary(uintBitsToFloat(w)));
    return;
  }
  uint ia = i, ib = i;
  if (pc.contiguous == 0) {
    ia = 0;
    ib = 0;
    uint rem = i;
    for (int k = int(pc.rank) - 1; k >= 0; --k) {
      uint idx = rem % pc.shape[k];
      rem /= pc.shape[k];
      ia += idx * pc.sa[k];
      ib += idx * pc.sb[k];
    }
  }
  y[i] = floatBitsToUint(binary(uintBitsToFloat(a[ia]), uintBitsToFloat(b[ib])));
}
