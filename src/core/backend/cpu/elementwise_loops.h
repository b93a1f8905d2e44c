// The elementwise loops shared by the primitive elementwise kernels and the fused programs:
// one loop per op over a span, so each vectorises on its own (both sources that include this
// are compiled with -ftree-vectorize, src/core/CMakeLists.txt).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels.h"

namespace meganeura::cpu {

// y[j] = op(x[j]) for n elements. p0, p1: the op's parameters (affine: scale and shift;
// clip_coef: the maximum norm), unused by the others.
template <class T>
void unary_loop(Op op, T p0, T p1, const T* x, T* y, int64_t n) {  // y may be x
  constexpr double kSqrt2OverPi = 0.7978845608028654, kInvSqrt2 = 0.7071067811865476, kInvSqrt2Pi = 0.3989422804014327;
  switch (op) {
    case Op::copy:
    case Op::detach:
      if (y != x) std::memcpy(y, x, size_t(n) * sizeof(T));
      return;
    case Op::neg:
      for (int64_t j = 0; j < n; ++j) y[j] = -x[j];
      return;
    case Op::exp:
      for (int64_t j = 0; j < n; ++j) y[j] = std::exp(x[j]);
      return;
    case Op::log:
      for (int64_t j = 0; j < n; ++j) y[j] = std::log(x[j]);
      return;
    case Op::sqrt:
      for (int64_t j = 0; j < n; ++j) y[j] = std::sqrt(x[j]);
      return;
    case Op::rsqrt:
      for (int64_t j = 0; j < n; ++j) y[j] = T(1) / std::sqrt(x[j]);
      return;
    case Op::abs:
      for (int64_t j = 0; j < n; ++j) y[j] = std::abs(x[j]);
      return;
    case Op::tanh:
      for (int64_t j = 0; j < n; ++j) y[j] = std::tanh(x[j]);
      return;
    case Op::sigmoid:
      for (int64_t j = 0; j < n; ++j) y[j] = T(1) / (T(1) + std::exp(-x[j]));
      return;
    case Op::relu:
      for (int64_t j = 0; j < n; ++j) y[j] = x[j] > T(0) ? x[j] : T(0);
      return;
    case Op::silu:
      for (int64_t j = 0; j < n; ++j) y[j] = x[j] / (T(1) + std::exp(-x[j]));
      return;
    case Op::gelu_tanh:
      for (int64_t j = 0; j < n; ++j) {
        T v = x[j], t = std::tanh(T(kSqrt2OverPi) * (v + T(0.044715) * v * v * v));
        y[j] = T(0.5) * v * (T(1) + t);
      }
      return;
    case Op::gelu_erf:
      for (int64_t j = 0; j < n; ++j) y[j] = T(0.5) * x[j] * (T(1) + std::erf(x[j] * T(kInvSqrt2)));
      return;
    case Op::gelu_tanh_grad:
      for (int64_t j = 0; j < n; ++j) {
        T v = x[j], t = std::tanh(T(kSqrt2OverPi) * (v + T(0.044715) * v * v * v));
        y[j] = T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * 0.044715) * v * v);
      }
      return;
    case Op::gelu_erf_grad:
      for (int64_t j = 0; j < n; ++j) {
        T v = x[j];
        y[j] = T(0.5) * (T(1) + std::erf(v * T(kInvSqrt2))) + v * T(kInvSqrt2Pi) * std::exp(T(-0.5) * v * v);
      }
      return;
    case Op::affine: {
      for (int64_t j = 0; j < n; ++j) y[j] = p0 * x[j] + p1;
      return;
    }
    case Op::sign:
      for (int64_t j = 0; j < n; ++j) y[j] = x[j] > T(0) ? T(1) : x[j] < T(0) ? T(-1) : T(0);
      return;
    case Op::positive_mask:
      for (int64_t j = 0; j < n; ++j) y[j] = x[j] > T(0) ? T(1) : T(0);
      return;
    case Op::clip_coef:
      for (int64_t j = 0; j < n; ++j) y[j] = std::min(T(1), p0 / (x[j] + T(1e-6)));
      return;
    case Op::sin:
      for (int64_t j = 0; j < n; ++j) y[j] = std::sin(x[j]);
      return;
    case Op::cos:
      for (int64_t j = 0; j < n; ++j) y[j] = std::cos(x[j]);
      return;
    default: kernel_error(op, "not a unary op");
  }
}

// y[j] = f(a, b) over n elements; an operand that is uniform over them is one value (va or vb
// false: its stride is 0), so a per-channel scale or shift is not filled out first. Both
// uniform: one result, in y[0].
template <class T, class F>
void binary_loop(F f, const T* a, bool va, const T* b, bool vb, T* y, int64_t n) {  // y may be a or b
  if (va && vb) {
    for (int64_t j = 0; j < n; ++j) y[j] = f(a[j], b[j]);
  } else if (va) {
    const T v = *b;
    for (int64_t j = 0; j < n; ++j) y[j] = f(a[j], v);
  } else if (vb) {
    const T v = *a;
    for (int64_t j = 0; j < n; ++j) y[j] = f(v, b[j]);
  } else {
    *y = f(*a, *b);
  }
}

}  // namespace meganeura::cpu
