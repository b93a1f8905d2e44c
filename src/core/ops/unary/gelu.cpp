// GELU in its exact (erf) and tanh-approximated forms, and their derivatives (which appear
// only inside gradients).
#include <cmath>

#include "ops/op_def.h"

namespace meganeura::ops {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654, kInvSqrt2 = 0.7071067811865476, kInvSqrt2Pi = 0.3989422804014327;

struct GeluTanh {
  template <class T>
  static T f(T x, T, T) {
    const T t = std::tanh(T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x));
    return T(0.5) * x * (T(1) + t);
  }
};
struct GeluErf {
  template <class T>
  static T f(T x, T, T) {
    return T(0.5) * x * (T(1) + std::erf(x * T(kInvSqrt2)));
  }
};
struct GeluTanhGrad {
  template <class T>
  static T f(T x, T, T) {
    const T t = std::tanh(T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x));
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * 0.044715) * x * x);
  }
};
struct GeluErfGrad {
  template <class T>
  static T f(T x, T, T) {
    return T(0.5) * (T(1) + std::erf(x * T(kInvSqrt2))) + x * T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
  }
};

Grads tanh_rule(const VjpArgs& a) { return {a.g * gelu_grad(a.x(), true)}; }
Grads erf_rule(const VjpArgs& a) { return {a.g * gelu_grad(a.x(), false)}; }

}  // namespace
}  // namespace meganeura::ops

meganeura::Tensor meganeura::gelu(Tensor x, bool tanh_approximation) {
  return ops::unary_node(tanh_approximation ? Op::gelu_tanh : Op::gelu_erf, x);
}
meganeura::Tensor meganeura::gelu_grad(Tensor x, bool tanh_approximation) {
  return ops::unary_node(tanh_approximation ? Op::gelu_tanh_grad : Op::gelu_erf_grad, x);
}

MEGANEURA_UNARY_OP(gelu_tanh, GeluTanh, .grad = GradKind::vjp, .flops = 8,
                   .glsl = "0.5 * x * (1.0 + stable_tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))",
                   .transcendental = true, .vjp = tanh_rule)
MEGANEURA_UNARY_OP(gelu_erf, GeluErf, .grad = GradKind::vjp, .flops = 8,
                   .glsl = "0.5 * x * (1.0 + erf_approx(x * INV_SQRT2))", .transcendental = true, .vjp = erf_rule)
MEGANEURA_UNARY_OP(gelu_tanh_grad, GeluTanhGrad, .grad = GradKind::backward_only, .flops = 8,
                   .glsl =
                       "float t = stable_tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x));\n"
                       "  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * "
                       "(1.0 + 3.0 * 0.044715 * x * x);",
                   .transcendental = true, .checked_by = Op::gelu_tanh)
MEGANEURA_UNARY_OP(gelu_erf_grad, GeluErfGrad, .grad = GradKind::backward_only, .flops = 8,
                   .glsl = "0.5 * (1.0 + erf_approx(x * INV_SQRT2)) + x * INV_SQRT_2PI * exp(-0.5 * x * x)",
                   .transcendental = true, .checked_by = Op::gelu_erf)
