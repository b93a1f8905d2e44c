// The elementwise ops shared by the pointwise kernel and the fused-program interpreter: the
// helpers the op declarations' GLSL calls, then the op codes and op functions generated from
// those declarations (ops_generated.glsl, written by the build).
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

#include "ops_generated.glsl"
