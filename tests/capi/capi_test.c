/* The C API from C (C11, linking only libmeganeura_c.so): runs y = relu(x W + b) from a program
 * JSON file on the CPU (and on Vulkan when a device is there), compares y elementwise with the
 * same formula computed here in double, and checks that every misuse returns its status with a
 * message naming the problem. Exits 1, listing each failed check, on any wrong result.
 *
 * usage: capi_test PROGRAM.json WORK_DIR
 */
#include <string.h>
#include <threads.h>

#include "capi_test_util.h"

/* `got` must be `want`, and the last error must contain each of the (up to three) needles. */
static void expect_error(int line, const char* what, meganeura_status got, meganeura_status want, const char* n1,
                         const char* n2, const char* n3) {
  const char* message = meganeura_last_error();
  if (got != want) {
    fprintf(stderr, "FAIL line %d: %s returned %s, expected %s (message: %s)\n", line, what, meganeura_status_name(got),
            meganeura_status_name(want), message);
    ++failures;
    return;
  }
  const char* needles[3] = {n1, n2, n3};
  for (int i = 0; i < 3; ++i) {
    if (needles[i] && !strstr(message, needles[i])) {
      fprintf(stderr, "FAIL line %d: %s: the message does not name \"%s\": %s\n", line, what, needles[i], message);
      ++failures;
    }
  }
  printf("  ok: %s -> %s: %s\n", what, meganeura_status_name(got), message);
}
#define EXPECT_ERROR(call, want, n1, n2, n3) expect_error(__LINE__, #call, (call), (want), (n1), (n2), (n3))

static meganeura_session* make_session(const char* device, int profile, const char* program) {
  meganeura_session_options o;
  MUST(meganeura_session_options_init(&o, MEGANEURA_C_API_VERSION_MAJOR));
  o.device = device;
  o.threads = 1;
  o.seed = 7;
  o.vulkan_profile = profile;
  o.vulkan_cache_dir = "-";
  meganeura_session* s = NULL;
  meganeura_status st = meganeura_session_create(&o, &s);
  if (st != MEGANEURA_OK) {
    CHECK(s == NULL, "a failed create left a session behind");
    return NULL;
  }
  MUST(meganeura_session_add_program_file(s, program, NULL));
  return s;
}

/* ---- the checks ---- */

static void check_versions(void) {
  int major = -1, minor = -1, patch = -1;
  meganeura_version(&major, &minor, &patch);
  meganeura_version(NULL, NULL, NULL);
  CHECK(major == MEGANEURA_C_API_VERSION_MAJOR && minor >= 0 && patch >= 0, "library %d.%d.%d", major, minor, patch);
  CHECK(strlen(meganeura_library_version()) > 0, "empty library version");
  MUST(meganeura_check_version(MEGANEURA_C_API_VERSION_MAJOR));
  char header[32];
  snprintf(header, sizeof header, "version %d.x", MEGANEURA_C_API_VERSION_MAJOR + 1);
  EXPECT_ERROR(meganeura_check_version(MEGANEURA_C_API_VERSION_MAJOR + 1), MEGANEURA_ERROR_VERSION_MISMATCH, header,
               "this library is", NULL);
  meganeura_session_options o;
  EXPECT_ERROR(meganeura_session_options_init(&o, MEGANEURA_C_API_VERSION_MAJOR + 1), MEGANEURA_ERROR_VERSION_MISMATCH,
               header, NULL, NULL);
  MUST(meganeura_session_options_init(&o, MEGANEURA_C_API_VERSION_MAJOR));
  o.api_major = MEGANEURA_C_API_VERSION_MAJOR + 1; /* a struct filled by a header of another major version */
  meganeura_session* s = (meganeura_session*)&o;   /* must be overwritten with NULL */
  EXPECT_ERROR(meganeura_session_create(&o, &s), MEGANEURA_ERROR_VERSION_MISMATCH, header, NULL, NULL);
  CHECK(s == NULL, "a refused create must give NULL");
  CHECK(strcmp(meganeura_status_name(MEGANEURA_ERROR_NOT_FOUND), "MEGANEURA_ERROR_NOT_FOUND") == 0, "status name");
  CHECK(strcmp(meganeura_dtype_name(MEGANEURA_DTYPE_BF16), "bf16") == 0, "dtype name");
}

static void check_null_arguments(const char* program) {
  meganeura_session* none = NULL;
  float y[N * M];
  size_t n = 0;
  meganeura_session_destroy(NULL);
  EXPECT_ERROR(meganeura_session_create(NULL, &none), MEGANEURA_ERROR_INVALID_ARGUMENT, "options is NULL", NULL, NULL);
  EXPECT_ERROR(meganeura_session_options_init(NULL, MEGANEURA_C_API_VERSION_MAJOR), MEGANEURA_ERROR_INVALID_ARGUMENT,
               "options is NULL", NULL, NULL);
  EXPECT_ERROR(meganeura_session_run(NULL, 0), MEGANEURA_ERROR_INVALID_ARGUMENT, "meganeura_session_run",
               "session is NULL", NULL);
  EXPECT_ERROR(meganeura_session_set(NULL, "x", MEGANEURA_DTYPE_F32, x_shape, 2, x, sizeof x),
               MEGANEURA_ERROR_INVALID_ARGUMENT, "session is NULL", NULL, NULL);
  EXPECT_ERROR(meganeura_session_get(NULL, "y", MEGANEURA_DTYPE_F32, y, sizeof y, NULL),
               MEGANEURA_ERROR_INVALID_ARGUMENT, "session is NULL", NULL, NULL);
  EXPECT_ERROR(meganeura_session_add_program_file(NULL, program, NULL), MEGANEURA_ERROR_INVALID_ARGUMENT,
               "session is NULL", NULL, NULL);
  EXPECT_ERROR(meganeura_session_load_checkpoint(NULL, "x.safetensors", 1), MEGANEURA_ERROR_INVALID_ARGUMENT,
               "session is NULL", NULL, NULL);
  EXPECT_ERROR(meganeura_session_buffer_count(NULL, &n), MEGANEURA_ERROR_INVALID_ARGUMENT, "session is NULL", NULL,
               NULL);
  EXPECT_ERROR(meganeura_session_profile(NULL, 0, NULL), MEGANEURA_ERROR_INVALID_ARGUMENT, "is NULL", NULL, NULL);

  meganeura_session* s = make_session("cpu", 0, program);
  CHECK(s != NULL, "no CPU session");
  if (!s) return;
  EXPECT_ERROR(meganeura_session_set(s, NULL, MEGANEURA_DTYPE_F32, x_shape, 2, x, sizeof x),
               MEGANEURA_ERROR_INVALID_ARGUMENT, "name is NULL", NULL, NULL);
  EXPECT_ERROR(meganeura_session_set(s, "x", MEGANEURA_DTYPE_F32, NULL, 2, x, sizeof x),
               MEGANEURA_ERROR_INVALID_ARGUMENT, "shape is NULL", NULL, NULL);
  EXPECT_ERROR(meganeura_session_set(s, "x", MEGANEURA_DTYPE_F32, x_shape, 2, NULL, sizeof x),
               MEGANEURA_ERROR_INVALID_ARGUMENT, "data is NULL", NULL, NULL);
  EXPECT_ERROR(meganeura_session_get(s, "y", MEGANEURA_DTYPE_F32, NULL, sizeof y, NULL),
               MEGANEURA_ERROR_INVALID_ARGUMENT, "data is NULL", NULL, NULL);
  EXPECT_ERROR(meganeura_session_buffer_count(s, NULL), MEGANEURA_ERROR_INVALID_ARGUMENT, "count is NULL", NULL, NULL);
  EXPECT_ERROR(meganeura_session_device_name(s, NULL), MEGANEURA_ERROR_INVALID_ARGUMENT, "name is NULL", NULL, NULL);
  EXPECT_ERROR(meganeura_session_add_program_json(s, NULL, 0, NULL), MEGANEURA_ERROR_INVALID_ARGUMENT, "json is NULL",
               NULL, NULL);
  EXPECT_ERROR(meganeura_session_load_checkpoint(s, NULL, 1), MEGANEURA_ERROR_INVALID_ARGUMENT, "path is NULL", NULL,
               NULL);
  meganeura_session_destroy(s);
}

/* The buffer list, roles, dtypes and shapes the program declares. */
static void check_buffers(meganeura_session* s) {
  static const char* const names[] = {"b", "w", "x", "y"};
  static const meganeura_role roles[] = {MEGANEURA_ROLE_PARAMETER, MEGANEURA_ROLE_PARAMETER, MEGANEURA_ROLE_INPUT,
                                         MEGANEURA_ROLE_OUTPUT};
  size_t count = 0;
  MUST(meganeura_session_buffer_count(s, &count));
  CHECK(count == 4, "%zu buffers, expected 4", count);
  for (size_t i = 0; i < count && i < 4; ++i) {
    const char* name = NULL;
    meganeura_role role = MEGANEURA_ROLE_MAX_ENUM;
    meganeura_dtype dtype = MEGANEURA_DTYPE_MAX_ENUM;
    MUST(meganeura_session_buffer_name(s, i, &name));
    CHECK(strcmp(name, names[i]) == 0, "buffer %zu is '%s', expected '%s'", i, name, names[i]);
    MUST(meganeura_session_buffer_info(s, name, &dtype, &role, NULL));
    CHECK(role == roles[i] && dtype == MEGANEURA_DTYPE_F32, "'%s': role %d, dtype %d", name, (int)role, (int)dtype);
  }
  const char* name = NULL;
  EXPECT_ERROR(meganeura_session_buffer_name(s, 4, &name), MEGANEURA_ERROR_INVALID_ARGUMENT, "no buffer 4", NULL, NULL);
  size_t rank = 0, program_count = 0;
  int64_t dims[2] = {0, 0};
  MUST(meganeura_session_buffer_info(s, "y", NULL, NULL, &rank));
  MUST(meganeura_session_buffer_shape(s, "y", dims, 2, &rank));
  CHECK(rank == 2 && dims[0] == N && dims[1] == M, "y is rank %zu [%lld, %lld]", rank, (long long)dims[0],
        (long long)dims[1]);
  EXPECT_ERROR(meganeura_session_buffer_shape(s, "y", dims, 1, NULL), MEGANEURA_ERROR_BUFFER_TOO_SMALL, "'y'", "rank 2",
               NULL);
  EXPECT_ERROR(meganeura_session_buffer_info(s, "nope", NULL, NULL, NULL), MEGANEURA_ERROR_NOT_FOUND, "'nope'",
               "b, w, x, y", NULL);
  MUST(meganeura_session_program_count(s, &program_count));
  CHECK(program_count == 1, "%zu programs", program_count);
}

/* Wrong shape, dtype, byte count, unknown names, a small output buffer, a bad program index. */
static void check_misuse(meganeura_session* s) {
  float y[N * M];
  const int64_t wrong[2] = {N, K - 1};
  EXPECT_ERROR(meganeura_session_set(s, "x", MEGANEURA_DTYPE_F32, wrong, 2, x, sizeof x),
               MEGANEURA_ERROR_SHAPE_MISMATCH, "'x'", "f32(8,16)", "f32(8,15)");
  EXPECT_ERROR(meganeura_session_set(s, "x", MEGANEURA_DTYPE_F32, x_shape, 1, x, sizeof x),
               MEGANEURA_ERROR_SHAPE_MISMATCH, "'x'", "f32(8,16)", "f32(8)");
  EXPECT_ERROR(meganeura_session_set(s, "x", MEGANEURA_DTYPE_F32, x_shape, 2, x, sizeof x - 4),
               MEGANEURA_ERROR_SHAPE_MISMATCH, "'x'", "512 bytes", "given 508");
  EXPECT_ERROR(meganeura_session_set(s, "x", MEGANEURA_DTYPE_I32, x_shape, 2, x, sizeof x),
               MEGANEURA_ERROR_SHAPE_MISMATCH, "'x'", "as i32", NULL);
  EXPECT_ERROR(meganeura_session_set(s, "x", (meganeura_dtype)42, x_shape, 2, x, sizeof x),
               MEGANEURA_ERROR_INVALID_ARGUMENT, "dtype 42", NULL, NULL);
  EXPECT_ERROR(meganeura_session_set(s, "nope", MEGANEURA_DTYPE_F32, x_shape, 2, x, sizeof x),
               MEGANEURA_ERROR_NOT_FOUND, "'nope'", "b, w, x, y", NULL);
  EXPECT_ERROR(meganeura_session_get(s, "nope", MEGANEURA_DTYPE_F32, y, sizeof y, NULL), MEGANEURA_ERROR_NOT_FOUND,
               "'nope'", NULL, NULL);
  size_t written = 12345;
  EXPECT_ERROR(meganeura_session_get(s, "y", MEGANEURA_DTYPE_F32, y, sizeof y - 1, &written),
               MEGANEURA_ERROR_BUFFER_TOO_SMALL, "'y'", "384 bytes", "capacity 383");
  CHECK(written == 12345, "a failed get wrote its out-parameter");
  EXPECT_ERROR(meganeura_session_get(s, "y", MEGANEURA_DTYPE_I32, y, sizeof y, NULL), MEGANEURA_ERROR_SHAPE_MISMATCH,
               "'y'", "as i32", NULL);
  EXPECT_ERROR(meganeura_session_run(s, 3), MEGANEURA_ERROR_INVALID_ARGUMENT, "no program 3", NULL, NULL);
  meganeura_profile p;
  EXPECT_ERROR(meganeura_session_profile(s, 0, &p), MEGANEURA_ERROR_UNAVAILABLE, "no profile", NULL, NULL);
  /* Runs that do not block share a Vulkan queue; a CPU session has none. */
  EXPECT_ERROR(meganeura_session_submit(s, 0, 0, 0, NULL, 0, NULL, 0), MEGANEURA_ERROR_UNAVAILABLE, "not on Vulkan",
               NULL, NULL);
  size_t chunks = 0;
  EXPECT_ERROR(meganeura_session_chunk_count(s, 0, &chunks), MEGANEURA_ERROR_UNAVAILABLE, "not on Vulkan", NULL, NULL);
  const meganeura_vulkan_image image = {1, 100 /* VK_FORMAT_R32_SFLOAT */, K, N, 0, 0};
  EXPECT_ERROR(meganeura_session_bind_image(s, "x", &image), MEGANEURA_ERROR_UNAVAILABLE, "not on Vulkan", NULL, NULL);
  EXPECT_ERROR(meganeura_session_bind_buffer(s, "x", 1, sizeof x), MEGANEURA_ERROR_UNAVAILABLE, "not on Vulkan", NULL,
               NULL);
  int done = -1;
  MUST(meganeura_session_poll(s, &done));
  CHECK(done == 1, "a CPU session has a run pending");
  MUST(meganeura_session_wait(s));
  EXPECT_ERROR(meganeura_session_poll(s, NULL), MEGANEURA_ERROR_INVALID_ARGUMENT, "done", NULL, NULL);
}

static void check_programs(meganeura_session* s, const char* work) {
  char path[4096];
  snprintf(path, sizeof path, "%s/no-such-program.json", work);
  EXPECT_ERROR(meganeura_session_add_program_file(s, path, NULL), MEGANEURA_ERROR_IO, "no-such-program.json",
               "No such file", NULL);
  const char* broken = "{\"float_dtype\": ";
  EXPECT_ERROR(meganeura_session_add_program_json(s, broken, strlen(broken), NULL), MEGANEURA_ERROR_INVALID_DATA,
               "not valid JSON", NULL, NULL);
  EXPECT_ERROR(meganeura_session_add_program_json(s, "{}", (size_t)-1, NULL), MEGANEURA_ERROR_INVALID_DATA, "missing",
               NULL, NULL);
  size_t count = 0;
  MUST(meganeura_session_program_count(s, &count));
  CHECK(count == 1, "a refused program was added (%zu programs)", count);
}

static int write_file(const char* path, const void* data, size_t bytes) {
  FILE* f = fopen(path, "wb");
  if (!f) return 0;
  const int ok = fwrite(data, 1, bytes, f) == bytes;
  return fclose(f) == 0 && ok;
}

/* Save the weights, load them into a fresh session (another seed), get the same y; refuse a
 * missing, a corrupt and a truncated file. */
static void check_checkpoints(meganeura_session* s, const float* y_cpu, const char* program, const char* work) {
  char saved[4096], corrupt[4096], truncated[4096], missing[4096];
  snprintf(saved, sizeof saved, "%s/capi-test-weights.safetensors", work);
  snprintf(corrupt, sizeof corrupt, "%s/capi-test-corrupt.safetensors", work);
  snprintf(truncated, sizeof truncated, "%s/capi-test-truncated.safetensors", work);
  snprintf(missing, sizeof missing, "%s/capi-test-missing.safetensors", work);
  MUST(meganeura_session_save_checkpoint(s, saved));

  meganeura_session_options o;
  MUST(meganeura_session_options_init(&o, MEGANEURA_C_API_VERSION_MAJOR));
  o.threads = 1;
  o.seed = 99;
  meganeura_session* t = NULL;
  MUST(meganeura_session_create(&o, &t));
  MUST(meganeura_session_add_program_file(t, program, NULL));
  float w_before[K * M], w_after[K * M], y[N * M];
  MUST(meganeura_session_get(t, "w", MEGANEURA_DTYPE_F32, w_before, sizeof w_before, NULL));
  CHECK(memcmp(w_before, w, sizeof w) != 0, "a fresh session already holds the saved weights");
  MUST(meganeura_session_load_checkpoint(t, saved, 0));
  MUST(meganeura_session_get(t, "w", MEGANEURA_DTYPE_F32, w_after, sizeof w_after, NULL));
  CHECK(memcmp(w_after, w, sizeof w) == 0, "the loaded weights differ from the saved ones");
  MUST(meganeura_session_set(t, "x", MEGANEURA_DTYPE_F32, x_shape, 2, x, sizeof x));
  run_and_get(t, y);
  CHECK(memcmp(y, y_cpu, sizeof y) == 0, "y after loading the checkpoint differs from the saved session's");
  printf("  ok: a checkpoint saved by one session and loaded into another gives the same y\n");

  static const char garbage[] = "this is not a safetensors file";
  CHECK(write_file(corrupt, garbage, sizeof garbage), "cannot write %s", corrupt);
  EXPECT_ERROR(meganeura_session_load_checkpoint(t, corrupt, 0), MEGANEURA_ERROR_INVALID_DATA,
               "capi-test-corrupt.safetensors", NULL, NULL);
  FILE* f = fopen(saved, "rb");
  char bytes[4096];
  const size_t n = f ? fread(bytes, 1, sizeof bytes, f) : 0;
  if (f) fclose(f);
  CHECK(n > 64 && n < sizeof bytes, "the checkpoint is %zu bytes", n);
  CHECK(write_file(truncated, bytes, n - 17), "cannot write %s", truncated);
  EXPECT_ERROR(meganeura_session_load_checkpoint(t, truncated, 0), MEGANEURA_ERROR_INVALID_DATA,
               "capi-test-truncated.safetensors", NULL, NULL);
  EXPECT_ERROR(meganeura_session_load_checkpoint(t, missing, 0), MEGANEURA_ERROR_IO, "capi-test-missing.safetensors",
               "No such file", NULL);
  /* The refused files changed nothing. */
  MUST(meganeura_session_get(t, "w", MEGANEURA_DTYPE_F32, w_after, sizeof w_after, NULL));
  CHECK(memcmp(w_after, w, sizeof w) == 0, "a refused checkpoint changed the weights");
  meganeura_session_destroy(t);
}

/* Sessions on other threads at the same time, each with its own last error. */
typedef struct {
  const char* program;
  int ok;
} Worker;

static int worker(void* arg) {
  Worker* job = (Worker*)arg;
  meganeura_session* s = make_session("cpu", 0, job->program);
  if (!s) return 0;
  set_all(s);
  float y[N * M];
  int ok = 1;
  for (int r = 0; r < 20 && ok; ++r) {
    run_and_get(s, y);
    for (int e = 0; e < N * M; ++e) ok &= fabs((double)y[e] - ref[e]) <= bound[e];
  }
  ok &= meganeura_session_run(s, 7) == MEGANEURA_ERROR_INVALID_ARGUMENT &&
        strstr(meganeura_last_error(), "no program 7") != NULL;
  meganeura_session_destroy(s);
  job->ok = ok;
  return 0;
}

static void check_threads(const char* program) {
  EXPECT_ERROR(meganeura_session_run(NULL, 0), MEGANEURA_ERROR_INVALID_ARGUMENT, "session is NULL", NULL, NULL);
  Worker jobs[3];
  thrd_t threads[3];
  for (int i = 0; i < 3; ++i) {
    jobs[i].program = program;
    jobs[i].ok = 0;
    CHECK(thrd_create(&threads[i], worker, &jobs[i]) == thrd_success, "thread %d", i);
  }
  for (int i = 0; i < 3; ++i) thrd_join(threads[i], NULL);
  for (int i = 0; i < 3; ++i) CHECK(jobs[i].ok, "thread %d got a wrong y or error", i);
  /* The other threads' errors did not replace this thread's message. */
  CHECK(strstr(meganeura_last_error(), "session is NULL") != NULL, "the last error changed: %s",
        meganeura_last_error());
  printf("  ok: three threads ran their own sessions at once\n");
}

static void check_devices(void) {
  meganeura_session_options o;
  meganeura_session* s = NULL;
  MUST(meganeura_session_options_init(&o, MEGANEURA_C_API_VERSION_MAJOR));
  o.device = "";
  EXPECT_ERROR(meganeura_session_create(&o, &s), MEGANEURA_ERROR_INVALID_ARGUMENT, "empty device", NULL, NULL);
  o.device = "cpu";
  o.threads = -2;
  EXPECT_ERROR(meganeura_session_create(&o, &s), MEGANEURA_ERROR_INVALID_ARGUMENT, "threads is -2", NULL, NULL);
  o.threads = 0;
  o.device = "auto"; /* a GPU when there is one, else the CPU: always a session */
  o.vulkan_cache_dir = "-";
  MUST(meganeura_session_create(&o, &s));
  const char* name = NULL;
  MUST(meganeura_session_device_name(s, &name));
  printf("  ok: device auto -> %s\n", name);
  meganeura_session_destroy(s);
}

static void check_vulkan(const float* y_cpu, const char* program) {
  meganeura_session* s = make_session("vulkan", 1, program);
  if (!s) {
    printf("  skipped: no Vulkan device (%s)\n", meganeura_last_error());
    return;
  }
  const char* name = NULL;
  MUST(meganeura_session_device_name(s, &name));
  set_all(s);
  float y[N * M];
  run_and_get(s, y);
  compare(name, y);
  /* Both within their bound of the reference, so within twice it of each other. */
  for (int e = 0; e < N * M; ++e) {
    CHECK(fabs((double)y[e] - (double)y_cpu[e]) <= 2 * bound[e], "y[%d]: vulkan %.9g, cpu %.9g", e, (double)y[e],
          (double)y_cpu[e]);
  }
  meganeura_profile p;
  MUST(meganeura_session_profile(s, 0, &p));
  CHECK(p.runs == 1 && p.dispatches > 0 && p.launches > 0 && p.step_ms >= 0, "profile: %llu runs, %llu dispatches",
        (unsigned long long)p.runs, (unsigned long long)p.dispatches);
  meganeura_launch_profile l;
  MUST(meganeura_session_profile_launch(s, 0, 0, &l));
  CHECK(l.kernel && l.kernel[0] && l.op && l.op[0], "a launch without kernel or op name");
  EXPECT_ERROR(meganeura_session_profile_launch(s, 0, p.launches, &l), MEGANEURA_ERROR_INVALID_ARGUMENT, "no launch",
               NULL, NULL);
  printf("  ok: %s: profile of %zu launches, first %s (%s)\n", name, p.launches, l.kernel, l.op);
  /* A run that does not block, on the session's own queue: a get waits for it. */
  for (int e = 0; e < N * M; ++e) y[e] = -1.0f;
  MUST(meganeura_session_submit(s, 0, 0, 0, NULL, 0, NULL, 0));
  size_t written = 0;
  MUST(meganeura_session_get(s, "y", MEGANEURA_DTYPE_F32, y, sizeof y, &written));
  compare(name, y);
  int done = 0;
  MUST(meganeura_session_poll(s, &done));
  CHECK(done == 1, "a run still pending after a get");
  MUST(meganeura_session_profile(s, 0, &p));
  CHECK(p.runs == 2, "profile after a submitted run: %llu runs", (unsigned long long)p.runs);
  meganeura_vulkan_semaphore null_sem = {0, 0, 0};
  EXPECT_ERROR(meganeura_session_submit(s, 0, 0, 0, &null_sem, 1, NULL, 0), MEGANEURA_ERROR_INVALID_ARGUMENT,
               "waits[0]", NULL, NULL);
  EXPECT_ERROR(meganeura_session_submit(s, 7, 0, 0, NULL, 0, NULL, 0), MEGANEURA_ERROR_INVALID_ARGUMENT, "no program 7",
               NULL, NULL);
  meganeura_session_destroy(s);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s PROGRAM.json WORK_DIR\n", argv[0]);
    return 2;
  }
  const char* program = argv[1];
  const char* work = argv[2];
  setvbuf(stdout, NULL, _IOLBF, 0); /* the progress lines in order with the failures on stderr */
  fill_inputs();
  reference();
  check_versions();
  check_null_arguments(program);

  meganeura_session* s = make_session("cpu", 0, program);
  if (!s) {
    fprintf(stderr, "FAIL: no CPU session: %s\n", meganeura_last_error());
    return 1;
  }
  check_buffers(s);
  set_all(s);
  float y[N * M], y_cpu[N * M];
  double y64[N * M];
  run_and_get(s, y_cpu);
  compare("cpu", y_cpu);
  /* As f64: the same values, converted. */
  MUST(meganeura_session_get(s, "y", MEGANEURA_DTYPE_F64, y64, sizeof y64, NULL));
  for (int e = 0; e < N * M; ++e) CHECK(y64[e] == (double)y_cpu[e], "y[%d] as f64: %.17g", e, y64[e]);
  check_misuse(s);
  check_programs(s, work);
  /* The refused calls changed nothing: the same run gives the same y. */
  run_and_get(s, y);
  CHECK(memcmp(y, y_cpu, sizeof y) == 0, "y changed after the refused calls");
  check_checkpoints(s, y_cpu, program, work);
  meganeura_session_destroy(s);
  check_threads(program);
  check_devices();
  check_vulkan(y_cpu, program);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("all C API checks passed\n");
  return 0;
}
