/* The installed C API from C: runs the program file given as argv[1], y = relu(x W + b) with
 * x f32[8, 16], W f32[16, 12], b f32[12] (tests/capi/make_program.cpp), on the CPU and compares y
 * with the formula in double (tolerance: 1e-5 relative to the sum of |terms|, well above the f32
 * error bound of a 17-term sum, about 1e-6 of it). Exits 0 when every element matches. */
#include <math.h>
#include <meganeura/meganeura.h>
#include <stdio.h>

enum { N = 8, K = 16, M = 12 };

static int fail(const char* what) {
  printf("FAIL: %s: %s\n", what, meganeura_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  if (meganeura_check_version(MEGANEURA_C_API_VERSION_MAJOR) != MEGANEURA_OK) return fail("version");
  meganeura_session_options o;
  meganeura_session* s = NULL;
  if (meganeura_session_options_init(&o, MEGANEURA_C_API_VERSION_MAJOR) || meganeura_session_create(&o, &s)) {
    return fail("create");
  }
  float x[N * K], w[K * M], b[M], y[N * M];
  for (int i = 0; i < N * K; ++i) x[i] = (float)sin(0.5 * i);
  for (int i = 0; i < K * M; ++i) w[i] = (float)cos(0.9 * i);
  for (int j = 0; j < M; ++j) b[j] = (float)(0.05 * j - 0.3);
  const int64_t xs[2] = {N, K}, ws[2] = {K, M}, bs[1] = {M};
  if (meganeura_session_add_program_file(s, argv[1], NULL) ||
      meganeura_session_set(s, "x", MEGANEURA_DTYPE_F32, xs, 2, x, sizeof x) ||
      meganeura_session_set(s, "w", MEGANEURA_DTYPE_F32, ws, 2, w, sizeof w) ||
      meganeura_session_set(s, "b", MEGANEURA_DTYPE_F32, bs, 1, b, sizeof b) || meganeura_session_run(s, 0) ||
      meganeura_session_get(s, "y", MEGANEURA_DTYPE_F32, y, sizeof y, NULL)) {
    return fail("run");
  }
  int bad = 0;
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < M; ++j) {
      double v = b[j], mag = fabs((double)b[j]);
      for (int k = 0; k < K; ++k) {
        v += (double)x[i * K + k] * w[k * M + j];
        mag += fabs((double)x[i * K + k] * w[k * M + j]);
      }
      if (v < 0) v = 0;
      bad += !(fabs(y[i * M + j] - v) <= 1e-5 * mag);
    }
  }
  meganeura_session_destroy(s);
  printf("%s: %d of %d elements off\n", bad ? "FAIL" : "OK", bad, N * M);
  return bad != 0;
}
