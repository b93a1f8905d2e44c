// The elementwise ops shared by the pointwise kernel and the fused-program interpreter.
// Op codes (kept in sync with lowering.cpp).
const uint COPY = 0, NEG = 1, EXP = 2, LOG = 3, SQRT = 4, RSQRT = 5, ABS = 6, TANH = 7, SIGMOID = 8,
           RELU = 9, GELU_TANH = 10, GELU_ERF = 11, SILU = 12, AFFINE = 13, SIGN = 14, POS_MASK = 15,
           GELU_TANH_GRAD = 16, GELU_ERF_GRAD = 17, CLIP_COEF = 18, F32_TO_I32 = 19, I32_TO_F32 = 20,
           SIN = 21, COS = 22, ADD = 32, SUB = 33, MUL = 34, DIV = 35, EQUAL = 36, MAXIMUM = 37, LESS = 38;

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

float unary_op(uint op, float x, float p0, float p1) {
  switch (op) {
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
    case AFFINE: return p0 * x + p1;
    case SIGN: return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0);
    case POS_MASK: return x > 0.0 ? 1.0 : 0.0;
    case GELU_TANH_GRAD: {
      float t = stable_tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x));
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x);
    }
    case GELU_ERF_GRAD: return 0.5 * (1.0 + erf_approx(x * INV_SQRT2)) + x * INV_SQRT_2PI * exp(-0.5 * x * x);
    case CLIP_COEF: return min(1.0, p0 / (x + 1e-6));
    case SIN: return sin(x);
    case COS: return cos(x);
  }
  return x;
}

float binary_op(uint op, float x, float z) {
  switch (op) {
    case ADD: return x + z;
    case SUB: return x - z;
    case MUL: return x * z;
    case DIV: return x / z;
    case EQUAL: return x == z ? 1.0 : 0.0;
    case MAXIMUM: return x < z ? z : x;
    case LESS: return x < z ? 1.0 : 0.0;
  }
  return x;
}

