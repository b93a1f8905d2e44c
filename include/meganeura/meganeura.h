/* The C API of Meganeura: run planned programs (Program JSON, as `meganeura program --json`
 * writes them) from C, C#, Rust or Python (ctypes), on the CPU or on Vulkan, the application's
 * own Vulkan device included. Plain C (C99 and later, and C++): opaque handles, status codes, a
 * thread-local message for the last error; no C++ exception ever leaves a function.
 *
 * Conventions (docs/embedding.md):
 * - Every function returns a meganeura_status; MEGANEURA_OK is 0. On any other status
 *   meganeura_last_error() gives a one-line message naming what was wrong (the argument, the
 *   buffer, the expected and the given shape, the file), and the out-parameters are unchanged
 *   (the contents of a failed meganeura_session_get's value buffer are unspecified).
 * - A NULL handle or out-pointer is MEGANEURA_ERROR_INVALID_ARGUMENT, never a crash. The
 *   destroy functions accept NULL.
 * - Strings given to the library are NUL-terminated UTF-8 and are copied. Strings returned by
 *   it belong to the handle they came from and stay valid as long as it says.
 * - A session is used by one thread at a time; different sessions may be used from different
 *   threads at once.
 */
#ifndef MEGANEURA_MEGANEURA_H
#define MEGANEURA_MEGANEURA_H

#include <stddef.h>
#include <stdint.h>

/* The version of this interface. The major number changes when a declaration here changes
 * incompatibly (a struct's layout, a function's parameters); the library refuses a header of
 * another major version (meganeura_check_version, meganeura_session_options_init). */
#define MEGANEURA_C_API_VERSION_MAJOR 1
#define MEGANEURA_C_API_VERSION_MINOR 0
#define MEGANEURA_C_API_VERSION_PATCH 0

/* The library is built with hidden visibility; these are its exported symbols. */
#if defined(__GNUC__)
#define MEGANEURA_C_EXPORT __attribute__((visibility("default")))
#else
#define MEGANEURA_C_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum meganeura_status {
  MEGANEURA_OK = 0,
  /* A NULL handle or pointer, an unknown device, a bad option or index. */
  MEGANEURA_ERROR_INVALID_ARGUMENT = 1,
  /* No buffer of that name in the session. */
  MEGANEURA_ERROR_NOT_FOUND = 2,
  /* The caller's dtype, shape or byte count differs from the buffer's. */
  MEGANEURA_ERROR_SHAPE_MISMATCH = 3,
  /* An output buffer (values, shape, names) too small for what it should receive. */
  MEGANEURA_ERROR_BUFFER_TOO_SMALL = 4,
  /* The header's major version is not the library's. */
  MEGANEURA_ERROR_VERSION_MISMATCH = 5,
  /* A file could not be opened, read or written. */
  MEGANEURA_ERROR_IO = 6,
  /* Malformed data: a corrupt checkpoint, invalid program JSON, a checkpoint whose tensors do
   * not match the session's. */
  MEGANEURA_ERROR_INVALID_DATA = 7,
  /* The device could not be created or failed (no Vulkan driver, a Vulkan error). */
  MEGANEURA_ERROR_DEVICE = 8,
  MEGANEURA_ERROR_OUT_OF_MEMORY = 9,
  /* Not available here (a profile of a session created without profiling). */
  MEGANEURA_ERROR_UNAVAILABLE = 10,
  /* Anything else: a bug; the message says what happened. */
  MEGANEURA_ERROR_INTERNAL = 11,
  /* The call needs the queue while a run is partly submitted (meganeura_session_submit). */
  MEGANEURA_ERROR_BUSY = 12,
  /* Not a status: makes the enum as wide as an int (any int value is valid to pass). */
  MEGANEURA_STATUS_MAX_ENUM = 0x7FFFFFFF
} meganeura_status;

/* Element types; the numbering is fixed. */
typedef enum meganeura_dtype {
  MEGANEURA_DTYPE_F32 = 0,
  MEGANEURA_DTYPE_F16 = 1,
  MEGANEURA_DTYPE_BF16 = 2,
  MEGANEURA_DTYPE_I32 = 3,
  MEGANEURA_DTYPE_U32 = 4,
  MEGANEURA_DTYPE_F64 = 5,
  MEGANEURA_DTYPE_MAX_ENUM = 0x7FFFFFFF /* not a dtype */
} meganeura_dtype;

/* What a program's external buffer is. */
typedef enum meganeura_role {
  MEGANEURA_ROLE_INPUT = 0,
  MEGANEURA_ROLE_PARAMETER = 1,
  MEGANEURA_ROLE_STATE = 2,
  MEGANEURA_ROLE_CONSTANT = 3,
  MEGANEURA_ROLE_OUTPUT = 4,
  MEGANEURA_ROLE_MAX_ENUM = 0x7FFFFFFF /* not a role */
} meganeura_role;

/* ---- versions and errors ---- */

/* The C API version of the library (not of the header): compare major with
 * MEGANEURA_C_API_VERSION_MAJOR. Any pointer may be NULL. */
MEGANEURA_C_EXPORT void meganeura_version(int* major, int* minor, int* patch);
/* The library's own release ("0.1.0"): static storage. */
MEGANEURA_C_EXPORT const char* meganeura_library_version(void);
/* MEGANEURA_OK when `header_major` (pass MEGANEURA_C_API_VERSION_MAJOR) is the library's major
 * version; MEGANEURA_ERROR_VERSION_MISMATCH, saying both, otherwise. */
MEGANEURA_C_EXPORT meganeura_status meganeura_check_version(int header_major);
/* The message of the last failed call on this thread ("" when none failed yet). Valid until the
 * next failing call on the same thread; a successful call leaves it as it was. */
MEGANEURA_C_EXPORT const char* meganeura_last_error(void);
/* The name of a status ("MEGANEURA_ERROR_NOT_FOUND"): static storage. */
MEGANEURA_C_EXPORT const char* meganeura_status_name(meganeura_status status);
/* "f32", "i32", ...: static storage; "?" for a value outside the enum. */
MEGANEURA_C_EXPORT const char* meganeura_dtype_name(meganeura_dtype dtype);

/* ---- sessions ---- */

/* An application's own Vulkan objects, borrowed by the session (never destroyed by it). The
 * handles are VkInstance, VkPhysicalDevice, VkDevice and VkQueue (dispatchable handles are
 * pointers on every platform); see docs/embedding.md for what the device must enable. */
typedef struct meganeura_vulkan_device {
  void* instance;
  void* physical_device;
  void* device;
  void* queue; /* a queue of `queue_family`, which must support compute */
  uint32_t queue_family;
  /* The vkGetInstanceProcAddr the application loaded Vulkan with, cast to this type; NULL:
   * libvulkan.so.1's. */
  void (*get_instance_proc_addr)(void);
} meganeura_vulkan_device;

typedef struct meganeura_session_options {
  /* The header's major version; meganeura_session_options_init sets it. */
  int32_t api_major;
  /* "cpu", "vulkan" (any Vulkan device, CPU-emulated ones included), "auto" (a discrete or
   * integrated GPU, else the CPU), or a Vulkan device's index or name substring, as the CLI's
   * --device. NULL: "cpu". Ignored when vulkan_device is set. */
  const char* device;
  /* CPU backend threads; 0: all cores. */
  int32_t threads;
  /* Seed of the parameters' initial values (a program's own initialisers). */
  uint64_t seed;
  /* Non-zero: every float tensor in double precision (the CPU reference oracle; a program
   * planned for f64 needs it). */
  int32_t f64;
  /* Vulkan: non-zero enables the Khronos validation layer (any message fails the call). */
  int32_t vulkan_validation;
  /* Vulkan: non-zero times every dispatch (meganeura_session_profile). */
  int32_t vulkan_profile;
  /* Vulkan: pipeline cache directory; NULL: $XDG_CACHE_HOME/meganeura; "-": no cache. */
  const char* vulkan_cache_dir;
  /* Non-NULL: run on the application's Vulkan device instead of creating one (copied by
   * meganeura_session_create; the objects it names must outlive the session). */
  const meganeura_vulkan_device* vulkan_device;
  /* Vulkan: each run is submitted in this many command buffers (0 or 1: one), so the
   * application's own queue work can run between them (meganeura_session_submit). */
  int32_t vulkan_chunks;
} meganeura_session_options;

/* Fills `options` with the defaults (device "cpu", all cores, seed 0) and api_major =
 * `header_major`; pass MEGANEURA_C_API_VERSION_MAJOR. A mismatched major version is refused
 * here and again by meganeura_session_create. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_options_init(meganeura_session_options* options,
                                                                   int header_major);

typedef struct meganeura_session meganeura_session;

/* Creates a session; `*session` receives it (NULL on failure). `options` must come from
 * meganeura_session_options_init. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_create(const meganeura_session_options* options,
                                                             meganeura_session** session);
/* Destroys a session and everything it allocated (NULL: nothing). */
MEGANEURA_C_EXPORT void meganeura_session_destroy(meganeura_session* session);
/* The device's name ("cpu (2 threads)", "vulkan: llvmpipe (...) (cpu)"): valid as long as the
 * session. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_device_name(const meganeura_session* session, const char** name);

/* ---- programs ---- */

/* Adds a program from its JSON text (Program::to_json, `meganeura program --json`; fields the
 * reader does not know are ignored); `length` bytes, or up to the NUL when length is
 * (size_t)-1. `*index` (may be NULL) receives the program's index for meganeura_session_run.
 * Programs of one session share their buffers by name (same dtype and shape required). */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_add_program_json(meganeura_session* session, const char* json,
                                                                       size_t length, size_t* index);
/* The same from a file. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_add_program_file(meganeura_session* session, const char* path,
                                                                       size_t* index);
MEGANEURA_C_EXPORT meganeura_status meganeura_session_program_count(const meganeura_session* session, size_t* count);

/* ---- checkpoints ---- */

/* Loads a checkpoint (safetensors, as `meganeura train --out` and save_checkpoint write it)
 * into the session's buffers, as `meganeura infer` does. parameters_only non-zero: load the
 * parameters and skip the optimizer state a training checkpoint also holds (an inference
 * session); zero: every parameter and state must be in the file. A missing, extra or
 * mis-shaped tensor is MEGANEURA_ERROR_INVALID_DATA naming it. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_load_checkpoint(meganeura_session* session, const char* path,
                                                                      int parameters_only);
/* Writes every parameter and state to a checkpoint file (atomically). */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_save_checkpoint(const meganeura_session* session,
                                                                      const char* path);

/* ---- buffers ---- */

/* The session's buffers (inputs, parameters, states, constants, outputs of all its programs),
 * sorted by name; adding a program may insert names, so an index is valid until then. A name's
 * string stays valid as long as the session. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_buffer_count(const meganeura_session* session, size_t* count);
MEGANEURA_C_EXPORT meganeura_status meganeura_session_buffer_name(const meganeura_session* session, size_t index,
                                                                  const char** name);
/* A buffer's dtype (its logical type), role and rank; each out-pointer may be NULL. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_buffer_info(const meganeura_session* session, const char* name,
                                                                  meganeura_dtype* dtype, meganeura_role* role,
                                                                  size_t* rank);
/* A buffer's shape into dims[0..rank); `capacity` entries available (too few:
 * MEGANEURA_ERROR_BUFFER_TOO_SMALL). `*rank` (may be NULL) receives the rank. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_buffer_shape(const meganeura_session* session, const char* name,
                                                                   int64_t* dims, size_t capacity, size_t* rank);

/* Writes a buffer (usually an input; a parameter too) from caller memory: `dtype`, `shape`
 * (`rank` dimensions) and `bytes` describe `data` and must match the buffer: the shape
 * exactly, bytes = elements * dtype size, and the dtype the buffer's, or for a floating-point
 * buffer also f32 or f64 (converted). A mismatch is MEGANEURA_ERROR_SHAPE_MISMATCH naming the
 * buffer, what it is and what was given. The values are copied before the call returns. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_set(meganeura_session* session, const char* name,
                                                          meganeura_dtype dtype, const int64_t* shape, size_t rank,
                                                          const void* data, size_t bytes);
/* Copies a buffer (usually an output) into caller memory as `dtype` (the buffer's own, or
 * f32/f64 for a floating-point buffer); `capacity` bytes available, at least elements * dtype
 * size (else MEGANEURA_ERROR_BUFFER_TOO_SMALL, saying both). `*written` (may be NULL)
 * receives the bytes written. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_get(const meganeura_session* session, const char* name,
                                                          meganeura_dtype dtype, void* data, size_t capacity,
                                                          size_t* written);

/* ---- running ---- */

/* Runs program `program` to completion (blocking): its outputs are then ready to read. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_run(meganeura_session* session, size_t program);

/* ---- the application's buffers and images as program tensors (Vulkan) ---- */

/* Uses the application's VkBuffer (its handle cast to uint64_t; storage and transfer src/dst
 * usage, at least `bytes`) as the session's buffer `name` for programs added afterwards: no
 * copy, no allocation. Bind before adding the programs that use the name. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_bind_buffer(meganeura_session* session, const char* name,
                                                                  uint64_t buffer, uint64_t bytes);

/* An application's 2D VkImage for an f32 input or output of width * height * channels
 * elements, row-major [height, width, channels]; `format` (a VkFormat) gives the channels:
 * R32_SFLOAT (1), R32G32_SFLOAT (2), R32G32B32A32_SFLOAT (4). One mip level and layer;
 * TRANSFER_SRC usage for an input, TRANSFER_DST for an output. Every run copies an input's
 * image into the tensor before its first kernel and an output's tensor into its image after
 * its last. Layout transitions: the run expects the image in `layout` (VkImageLayout; an
 * output may say UNDEFINED, discarding its contents), holds it in TRANSFER_SRC_OPTIMAL or
 * TRANSFER_DST_OPTIMAL, and leaves it in `final_layout`; the barriers around the copies wait
 * for and are waited for by all commands on the queue. */
typedef struct meganeura_vulkan_image {
  uint64_t image;
  uint32_t format;
  uint32_t width;
  uint32_t height;
  uint32_t layout;
  uint32_t final_layout;
} meganeura_vulkan_image;
/* Binds `image` to the tensor `name` of programs added afterwards. A program whose tensor of
 * that name is not an f32 input or output of as many elements is refused when added
 * (MEGANEURA_ERROR_INVALID_ARGUMENT naming both). A session not on Vulkan:
 * MEGANEURA_ERROR_UNAVAILABLE. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_bind_image(meganeura_session* session, const char* name,
                                                                 const meganeura_vulkan_image* image);

/* ---- runs that share the queue with the application (Vulkan) ---- */

/* One of the application's semaphores: a VkSemaphore's handle, cast to uint64_t. `value`: a
 * timeline semaphore's value (the device must enable the timelineSemaphore feature); 0: a
 * binary semaphore. `stages`: for a wait, the VkPipelineStageFlags it holds (0: all commands). */
typedef struct meganeura_vulkan_semaphore {
  uint64_t semaphore;
  uint64_t value;
  uint32_t stages;
} meganeura_vulkan_semaphore;

/* Queues chunks [first_chunk, first_chunk + chunk_count) of a run of `program` on the queue
 * and returns without waiting (chunk_count 0: through the last chunk). The first of them waits
 * on `waits`, the last signals `signals` when its work is done, all the run's writes made
 * available. A run's chunks go in order from chunk 0, in one call or several, with the
 * application's own submissions between them; while a run is partly submitted, any other call
 * that needs the queue (run, set, get, load, add a program) is MEGANEURA_ERROR_BUSY. Once the
 * last chunk is queued the run is pending: meganeura_session_poll tells whether it finished,
 * and the session's next call that reads, writes or runs waits for it first. Any buffer the
 * run reads or writes must not be touched by the application until the run's signal (or the
 * pending run has been waited for). A session not on Vulkan: MEGANEURA_ERROR_UNAVAILABLE. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_submit(meganeura_session* session, size_t program,
                                                             size_t first_chunk, size_t chunk_count,
                                                             const meganeura_vulkan_semaphore* waits, size_t wait_count,
                                                             const meganeura_vulkan_semaphore* signals,
                                                             size_t signal_count);
/* The number of chunks a run of `program` is submitted in (vulkan_chunks, at most one per
 * kernel launch). */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_chunk_count(const meganeura_session* session, size_t program,
                                                                  size_t* count);
/* `*done` = 1 when no submitted run is still executing, 0 otherwise; never blocks. */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_poll(const meganeura_session* session, int* done);
/* Blocks until the submitted run has finished (not the application's work on the queue). */
MEGANEURA_C_EXPORT meganeura_status meganeura_session_wait(meganeura_session* session);

/* The work of the last run of `program`, from the Vulkan backend's timestamp queries: sessions
 * created with vulkan_profile set. Otherwise MEGANEURA_ERROR_UNAVAILABLE. */
typedef struct meganeura_profile {
  uint64_t runs;       /* profiled runs so far */
  double step_ms;      /* summed over the runs, first to last timestamp */
  uint64_t dispatches; /* per run */
  uint64_t barriers;   /* per run */
  size_t launches;     /* kernel launches per run (meganeura_session_profile_launch) */
} meganeura_profile;
typedef struct meganeura_launch_profile {
  const char* kernel; /* valid until the next run of the session or its destruction */
  const char* op;     /* likewise */
  uint32_t dispatch;  /* the program's dispatch it belongs to */
  double ms;          /* summed over the profiled runs */
  double flops;       /* per run */
  double bytes;       /* per run */
} meganeura_launch_profile;
MEGANEURA_C_EXPORT meganeura_status meganeura_session_profile(const meganeura_session* session, size_t program,
                                                              meganeura_profile* profile);
MEGANEURA_C_EXPORT meganeura_status meganeura_session_profile_launch(const meganeura_session* session, size_t program,
                                                                     size_t launch, meganeura_launch_profile* out);

#ifdef __cplusplus
}
#endif

#endif /* MEGANEURA_MEGANEURA_H */
