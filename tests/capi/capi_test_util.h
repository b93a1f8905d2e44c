/* What the C API tests share: the model y = relu(x W + b) of the program make_program.cpp
 * writes, its inputs, its reference in double with the f32 error bound, and the checks' macros. */
#ifndef MEGANEURA_TESTS_CAPI_UTIL_H
#define MEGANEURA_TESTS_CAPI_UTIL_H

#include <math.h>
#include <meganeura/meganeura.h>
#include <stdio.h>
#include <stdlib.h>

enum { N = 8, K = 16, M = 12 };

static int failures = 0;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\n");                                          \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

/* A call that must succeed; the test cannot go on otherwise. */
#define MUST(call)                                                                                                   \
  do {                                                                                                               \
    meganeura_status must_s_ = (call);                                                                               \
    if (must_s_ != MEGANEURA_OK) {                                                                                   \
      fprintf(stderr, "FAIL %s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call, meganeura_status_name(must_s_), \
              meganeura_last_error());                                                                               \
      exit(1);                                                                                                       \
    }                                                                                                                \
  } while (0)

/* ---- the model and its reference ---- */

static float x[N * K], w[K * M], b[M];

static inline void fill_inputs(void) {
  for (int i = 0; i < N * K; ++i) x[i] = (float)sin(0.7 * i + 0.3);
  for (int i = 0; i < K * M; ++i) w[i] = (float)(0.5 * cos(1.3 * i));
  for (int j = 0; j < M; ++j) b[j] = (float)(0.1 * j - 0.5);
}

/* y = relu(x W + b) in double from the same float values, and for each element the bound on
 * an f32 computation's error: a sum of K products plus the bias, in any order and with or
 * without FMA, is within gamma_{K+1} * (sum |x w| + |b|) of the exact value (Higham, Accuracy
 * and Stability of Numerical Algorithms, 3.1), gamma_n = n u / (1 - n u), u = 2^-24; relu is
 * 1-Lipschitz. The bound is taken with n = K + 2 for slack, a few times 1e-6 here: a wrong
 * index, a missing bias or a missing relu is off by much more. */
static double ref[N * M], bound[N * M];

static inline void reference(void) {
  const double u = ldexp(1.0, -24), n = K + 2, gamma = n * u / (1 - n * u);
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < M; ++j) {
      double s = b[j], mag = fabs((double)b[j]);
      for (int k = 0; k < K; ++k) {
        s += (double)x[i * K + k] * (double)w[k * M + j];
        mag += fabs((double)x[i * K + k] * (double)w[k * M + j]);
      }
      ref[i * M + j] = s > 0 ? s : 0;
      bound[i * M + j] = gamma * mag;
    }
  }
}

static inline void compare(const char* device, const float* y) {
  int zeros = 0, positive = 0, bad = 0;
  for (int e = 0; e < N * M; ++e) {
    if (!(fabs((double)y[e] - ref[e]) <= bound[e])) {
      if (++bad <= 5) {
        fprintf(stderr, "FAIL %s: y[%d][%d] = %.9g, reference %.9g, bound %.3g\n", device, e / M, e % M, (double)y[e],
                ref[e], bound[e]);
      }
    }
    zeros += ref[e] == 0;
    positive += ref[e] > 0;
  }
  failures += bad;
  /* Both sides of the relu are exercised. */
  CHECK(zeros > 0 && positive > 0, "%d zeros, %d positive values in the reference", zeros, positive);
  printf("  ok: %s: y matches the f64 reference within the f32 bound (%d of %d elements clipped)\n", device, zeros,
         N * M);
}

static const int64_t x_shape[2] = {N, K}, w_shape[2] = {K, M}, b_shape[1] = {M};

static inline void set_all(meganeura_session* s) {
  MUST(meganeura_session_set(s, "x", MEGANEURA_DTYPE_F32, x_shape, 2, x, sizeof x));
  MUST(meganeura_session_set(s, "w", MEGANEURA_DTYPE_F32, w_shape, 2, w, sizeof w));
  MUST(meganeura_session_set(s, "b", MEGANEURA_DTYPE_F32, b_shape, 1, b, sizeof b));
}

static inline void run_and_get(meganeura_session* s, float* y) {
  size_t written = 0;
  MUST(meganeura_session_run(s, 0));
  MUST(meganeura_session_get(s, "y", MEGANEURA_DTYPE_F32, y, N * M * sizeof(float), &written));
  CHECK(written == N * M * sizeof(float), "%zu bytes written", written);
}

#endif
