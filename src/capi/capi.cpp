// The C API (include/meganeura/meganeura.h) over Session: every entry point checks its
// pointers, runs its body inside guard(), which turns every exception into a status and the
// thread's last-error message, and never lets one escape.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "meganeura/checkpoint.h"
#include "meganeura/meganeura.h"
#include "meganeura/safetensors.h"
#include "meganeura/session.h"
#include "meganeura/vulkan.h"

using namespace meganeura;

struct meganeura_session {
  VulkanExternalDevice external;  // the application's device, when any: outlives the backend
  std::unique_ptr<Session> session;
  std::string device_name;
  std::vector<const char*> names;  // keys of session->buffers(), stable in the map
};

namespace {

constexpr int kMajor = MEGANEURA_C_API_VERSION_MAJOR, kMinor = MEGANEURA_C_API_VERSION_MINOR,
              kPatch = MEGANEURA_C_API_VERSION_PATCH;

// The message of the last failure on this thread; a fixed one when recording it ran out of memory.
thread_local std::string t_message;
thread_local const char* t_fixed = nullptr;

// A failure with its own status, raised by the checks below.
struct Failure {
  meganeura_status status;
  std::string message;
};
[[noreturn]] void fail(meganeura_status s, std::string message) { throw Failure{s, std::move(message)}; }

meganeura_status record(meganeura_status s, const char* function, const char* message) noexcept {
  try {
    t_message = std::string(function) + ": " + message;
    t_fixed = nullptr;
  } catch (...) {
    t_fixed = "out of memory while recording an error";
  }
  return s;
}

// Runs `body`; an exception becomes a status: `other` for a std::exception the checks do not
// classify (the device's errors, for the calls that reach it).
template <class Body>
meganeura_status guard(const char* function, meganeura_status other, Body&& body) noexcept {
  try {
    body();
    return MEGANEURA_OK;
  } catch (const Failure& f) {
    return record(f.status, function, f.message.c_str());
  } catch (const io::Error& e) {
    return record(MEGANEURA_ERROR_INVALID_DATA, function, e.what());
  } catch (const std::bad_alloc&) {
    return record(MEGANEURA_ERROR_OUT_OF_MEMORY, function, "out of memory");
  } catch (const std::invalid_argument& e) {
    return record(MEGANEURA_ERROR_INVALID_ARGUMENT, function, e.what());
  } catch (const std::out_of_range& e) {
    return record(MEGANEURA_ERROR_INVALID_ARGUMENT, function, e.what());
  } catch (const std::length_error& e) {
    return record(MEGANEURA_ERROR_INVALID_ARGUMENT, function, e.what());
  } catch (const std::logic_error& e) {  // a call out of turn (a partly submitted run)
    return record(MEGANEURA_ERROR_BUSY, function, e.what());
  } catch (const std::exception& e) {
    return record(other, function, e.what());
  } catch (...) {
    return record(MEGANEURA_ERROR_INTERNAL, function, "unknown exception");
  }
}

void need(const void* p, const char* what) {
  if (!p) fail(MEGANEURA_ERROR_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

Session& session_of(meganeura_session* s) {
  need(s, "session");
  return *s->session;
}
const Session& session_of(const meganeura_session* s) {
  need(s, "session");
  return *s->session;
}

void check_major(int major) {
  if (major != kMajor) {
    fail(MEGANEURA_ERROR_VERSION_MISMATCH, "the header is C API version " + std::to_string(major) +
                                               ".x, this library is " + std::to_string(kMajor) + "." +
                                               std::to_string(kMinor) + "." + std::to_string(kPatch));
  }
}

DType dtype_of(meganeura_dtype d) {
  if (d < MEGANEURA_DTYPE_F32 || d > MEGANEURA_DTYPE_F64) {
    fail(MEGANEURA_ERROR_INVALID_ARGUMENT, "dtype " + std::to_string(int(d)) + " is not a meganeura_dtype");
  }
  return DType(d);  // the numbering of meganeura_dtype is DType's (static_asserts below)
}
static_assert(int(DType::f32) == MEGANEURA_DTYPE_F32 && int(DType::f16) == MEGANEURA_DTYPE_F16 &&
              int(DType::bf16) == MEGANEURA_DTYPE_BF16 && int(DType::i32) == MEGANEURA_DTYPE_I32 &&
              int(DType::u32) == MEGANEURA_DTYPE_U32 && int(DType::f64) == MEGANEURA_DTYPE_F64);

meganeura_role role_of(Role r) {
  switch (r) {
    case Role::input: return MEGANEURA_ROLE_INPUT;
    case Role::parameter: return MEGANEURA_ROLE_PARAMETER;
    case Role::state: return MEGANEURA_ROLE_STATE;
    case Role::constant: return MEGANEURA_ROLE_CONSTANT;
    case Role::output: return MEGANEURA_ROLE_OUTPUT;
    case Role::temp: break;
  }
  fail(MEGANEURA_ERROR_INTERNAL, "a session buffer with the role of a temporary");
}

std::string quoted(const char* s) { return "'" + std::string(s) + "'"; }

std::string describe(DType t, const std::vector<int64_t>& shape) {
  return std::string(dtype_name(t)) + shape_str(shape);
}

const ExternalBuffer& find_buffer(const Session& s, const char* name) {
  need(name, "name");
  auto it = s.buffers().find(name);
  if (it == s.buffers().end()) {
    std::string known;
    for (const auto& [k, b] : s.buffers()) known += (known.empty() ? "" : ", ") + k;
    fail(MEGANEURA_ERROR_NOT_FOUND,
         "no buffer named " + quoted(name) + " (the session has: " + (known.empty() ? "none" : known) + ")");
  }
  return it->second;
}

// The dtypes values of buffer `e` cross the API as: its own, and f32 or f64 for a float buffer.
void check_dtype(const ExternalBuffer& e, DType given, const char* verb) {
  if (given == e.type.dtype || (dtype_is_float(e.type.dtype) && (given == DType::f32 || given == DType::f64))) return;
  fail(MEGANEURA_ERROR_SHAPE_MISMATCH, quoted(e.name.c_str()) + " is " + describe(e.type.dtype, e.type.shape) +
                                           "; cannot " + verb + " it as " + std::string(dtype_name(given)) +
                                           (dtype_is_float(e.type.dtype) ? " (f32, f64 or its own dtype)" : ""));
}

size_t byte_count(const ExternalBuffer& e, DType t) { return size_t(storage_bytes(t, e.type.numel())); }

std::string read_file(const char* path) {
  need(path, "path");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(MEGANEURA_ERROR_IO, "cannot open " + quoted(path) + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(MEGANEURA_ERROR_IO, "cannot read " + quoted(path));
  return text.str();
}

size_t add_program(meganeura_session* s, const std::string& json, const std::string& source) {
  Session& session = session_of(s);
  Program p;
  try {
    p = Program::from_json(json);
    verify(p);
  } catch (const std::invalid_argument& e) {
    fail(MEGANEURA_ERROR_INVALID_DATA, source + ": " + e.what());
  }
  const size_t index = session.add(std::move(p));
  s->names.clear();
  for (const auto& [name, b] : session.buffers()) s->names.push_back(name.c_str());
  return index;
}

const VulkanProgramProfile& profile_of(const meganeura_session* s, size_t program) {
  const Session& session = session_of(s);
  if (program >= session.program_count()) {
    fail(MEGANEURA_ERROR_INVALID_ARGUMENT, "no program " + std::to_string(program) + " (the session has " +
                                               std::to_string(session.program_count()) + ")");
  }
  const VulkanProgramProfile* p = vulkan_profile(session.backend(), program);
  if (!p) {
    fail(MEGANEURA_ERROR_UNAVAILABLE, "no profile: the session runs on " + s->device_name +
                                          (session.device_name().rfind("vulkan", 0) == 0
                                               ? ", created without vulkan_profile"
                                               : "; profiles come from the Vulkan backend (vulkan_profile)"));
  }
  return *p;
}

void on_vulkan(const meganeura_session* s) {
  if (session_of(s).device_name().rfind("vulkan", 0) != 0)
    fail(MEGANEURA_ERROR_UNAVAILABLE, "the session runs on " + s->device_name + ", not on Vulkan");
}

}  // namespace

extern "C" {

void meganeura_version(int* major, int* minor, int* patch) {
  if (major) *major = kMajor;
  if (minor) *minor = kMinor;
  if (patch) *patch = kPatch;
}

const char* meganeura_library_version(void) { return MEGANEURA_LIBRARY_VERSION; }

meganeura_status meganeura_check_version(int header_major) {
  return guard(__func__, MEGANEURA_ERROR_INTERNAL, [&] { check_major(header_major); });
}

const char* meganeura_last_error(void) { return t_fixed ? t_fixed : t_message.c_str(); }

const char* meganeura_status_name(meganeura_status status) {
  switch (status) {
    case MEGANEURA_OK: return "MEGANEURA_OK";
    case MEGANEURA_ERROR_INVALID_ARGUMENT: return "MEGANEURA_ERROR_INVALID_ARGUMENT";
    case MEGANEURA_ERROR_NOT_FOUND: return "MEGANEURA_ERROR_NOT_FOUND";
    case MEGANEURA_ERROR_SHAPE_MISMATCH: return "MEGANEURA_ERROR_SHAPE_MISMATCH";
    case MEGANEURA_ERROR_BUFFER_TOO_SMALL: return "MEGANEURA_ERROR_BUFFER_TOO_SMALL";
    case MEGANEURA_ERROR_VERSION_MISMATCH: return "MEGANEURA_ERROR_VERSION_MISMATCH";
    case MEGANEURA_ERROR_IO: return "MEGANEURA_ERROR_IO";
    case MEGANEURA_ERROR_INVALID_DATA: return "MEGANEURA_ERROR_INVALID_DATA";
    case MEGANEURA_ERROR_DEVICE: return "MEGANEURA_ERROR_DEVICE";
    case MEGANEURA_ERROR_OUT_OF_MEMORY: return "MEGANEURA_ERROR_OUT_OF_MEMORY";
    case MEGANEURA_ERROR_UNAVAILABLE: return "MEGANEURA_ERROR_UNAVAILABLE";
    case MEGANEURA_ERROR_INTERNAL: return "MEGANEURA_ERROR_INTERNAL";
    case MEGANEURA_ERROR_BUSY: return "MEGANEURA_ERROR_BUSY";
    case MEGANEURA_STATUS_MAX_ENUM: break;
  }
  return "MEGANEURA_ERROR_UNKNOWN_STATUS";
}

const char* meganeura_dtype_name(meganeura_dtype dtype) {
  if (dtype < MEGANEURA_DTYPE_F32 || dtype > MEGANEURA_DTYPE_F64) return "?";
  return dtype_name(DType(dtype)).data();  // string literals: NUL-terminated
}

meganeura_status meganeura_session_options_init(meganeura_session_options* options, int header_major) {
  return guard(__func__, MEGANEURA_ERROR_INTERNAL, [&] {
    need(options, "options");
    check_major(header_major);
    *options = meganeura_session_options{};
    options->api_major = header_major;
    options->device = "cpu";
  });
}

meganeura_status meganeura_session_create(const meganeura_session_options* options, meganeura_session** session) {
  return guard(__func__, MEGANEURA_ERROR_DEVICE, [&] {
    need(session, "session (the out-pointer)");
    *session = nullptr;
    need(options, "options");
    check_major(options->api_major);
    if (options->threads < 0) {
      fail(MEGANEURA_ERROR_INVALID_ARGUMENT, "threads is " + std::to_string(options->threads) + " (0: all cores)");
    }
    SessionOptions so;
    select_device(so, options->device ? options->device : "cpu");
    so.threads = options->threads;
    so.seed = options->seed;
    so.f64_oracle = options->f64 != 0;
    so.vulkan_validation = options->vulkan_validation != 0;
    so.vulkan_profile = options->vulkan_profile != 0;
    if (options->vulkan_cache_dir) so.vulkan_cache_dir = options->vulkan_cache_dir;
    if (options->vulkan_chunks < 0) {
      fail(MEGANEURA_ERROR_INVALID_ARGUMENT,
           "vulkan_chunks is " + std::to_string(options->vulkan_chunks) + " (0 or 1: one)");
    }
    so.vulkan_chunks = std::max(1, int(options->vulkan_chunks));
    auto s = std::make_unique<meganeura_session>();
    if (const meganeura_vulkan_device* d = options->vulkan_device) {
      s->external =
          VulkanExternalDevice{d->instance, d->physical_device, d->device,
                               d->queue,    d->queue_family,    reinterpret_cast<void*>(d->get_instance_proc_addr)};
      so.device = Device::vulkan;
      so.vulkan_external = &s->external;
    }
    s->session = std::make_unique<Session>(so);
    s->device_name = s->session->device_name();
    *session = s.release();
  });
}

void meganeura_session_destroy(meganeura_session* session) {
  // Destructors do not throw; a backend's teardown that did would end the process, as any
  // noexcept violation does.
  delete session;
}

meganeura_status meganeura_session_device_name(const meganeura_session* session, const char** name) {
  return guard(__func__, MEGANEURA_ERROR_INTERNAL, [&] {
    session_of(session);
    need(name, "name");
    *name = session->device_name.c_str();
  });
}

meganeura_status meganeura_session_add_program_json(meganeura_session* session, const char* json, size_t length,
                                                    size_t* index) {
  return guard(__func__, MEGANEURA_ERROR_DEVICE, [&] {
    session_of(session);
    need(json, "json");
    const size_t i =
        add_program(session, length == size_t(-1) ? std::string(json) : std::string(json, length), "the program JSON");
    if (index) *index = i;
  });
}

meganeura_status meganeura_session_add_program_file(meganeura_session* session, const char* path, size_t* index) {
  return guard(__func__, MEGANEURA_ERROR_DEVICE, [&] {
    session_of(session);
    const size_t i = add_program(session, read_file(path), quoted(path));
    if (index) *index = i;
  });
}

meganeura_status meganeura_session_program_count(const meganeura_session* session, size_t* count) {
  return guard(__func__, MEGANEURA_ERROR_INTERNAL, [&] {
    const Session& s = session_of(session);
    need(count, "count");
    *count = s.program_count();
  });
}

meganeura_status meganeura_session_load_checkpoint(meganeura_session* session, const char* path, int parameters_only) {
  return guard(__func__, MEGANEURA_ERROR_DEVICE, [&] {
    Session& s = session_of(session);
    need(path, "path");
    if (std::FILE* f = std::fopen(path, "rb")) {
      std::fclose(f);
    } else {
      fail(MEGANEURA_ERROR_IO, "cannot open " + quoted(path) + ": " + std::strerror(errno));
    }
    load_checkpoint(s, path, LoadOptions{.parameters_only = parameters_only != 0});
  });
}

meganeura_status meganeura_session_save_checkpoint(const meganeura_session* session, const char* path) {
  return guard(__func__, MEGANEURA_ERROR_DEVICE, [&] {
    const Session& s = session_of(session);
    need(path, "path");
    try {
      save_checkpoint(s, path);
    } catch (const io::Error& e) {  // writing: the file system's errors
      fail(MEGANEURA_ERROR_IO, e.what());
    }
  });
}

meganeura_status meganeura_session_buffer_count(const meganeura_session* session, size_t* count) {
  return guard(__func__, MEGANEURA_ERROR_INTERNAL, [&] {
    session_of(session);
    need(count, "count");
    *count = session->names.size();
  });
}

meganeura_status meganeura_session_buffer_name(const meganeura_session* session, size_t index, const char** name) {
  return guard(__func__, MEGANEURA_ERROR_INTERNAL, [&] {
    session_of(session);
    need(name, "name");
    if (index >= session->names.size()) {
      fail(MEGANEURA_ERROR_INVALID_ARGUMENT,
           "no buffer " + std::to_string(index) + " (the session has " + std::to_string(session->names.size()) + ")");
    }
    *name = session->names[index];
  });
}

meganeura_status meganeura_session_buffer_info(const meganeura_session* session, const char* name,
                                               meganeura_dtype* dtype, meganeura_role* role, size_t* rank) {
  return guard(__func__, MEGANEURA_ERROR_INTERNAL, [&] {
    const ExternalBuffer& e = find_buffer(session_of(session), name);
    const meganeura_role r = role_of(e.role);
    if (dtype) *dtype = meganeura_dtype(e.type.dtype);
    if (role) *role = r;
    if (rank) *rank = e.type.shape.size();
  });
}

meganeura_status meganeura_session_buffer_shape(const meganeura_session* session, const char* name, int64_t* dims,
                                                size_t capacity, size_t* rank) {
  return guard(__func__, MEGANEURA_ERROR_INTERNAL, [&] {
    const ExternalBuffer& e = find_buffer(session_of(session), name);
    const size_t n = e.type.shape.size();
    if (capacity < n) {
      fail(MEGANEURA_ERROR_BUFFER_TOO_SMALL, quoted(name) + " has rank " + std::to_string(n) + "; capacity for " +
                                                 std::to_string(capacity) + " dimensions");
    }
    if (n) need(dims, "dims");
    for (size_t i = 0; i < n; ++i) dims[i] = e.type.shape[i];
    if (rank) *rank = n;
  });
}

meganeura_status meganeura_session_set(meganeura_session* session, const char* name, meganeura_dtype dtype,
                                       const int64_t* shape, size_t rank, const void* data, size_t bytes) {
  return guard(__func__, MEGANEURA_ERROR_DEVICE, [&] {
    Session& s = session_of(session);
    const ExternalBuffer& e = find_buffer(s, name);
    const DType given = dtype_of(dtype);
    if (rank) need(shape, "shape");
    const std::vector<int64_t> given_shape(shape, shape + rank);
    check_dtype(e, given, "set");
    if (given_shape != e.type.shape) {
      fail(MEGANEURA_ERROR_SHAPE_MISMATCH,
           quoted(name) + " is " + describe(e.type.dtype, e.type.shape) + "; given " + describe(given, given_shape));
    }
    const size_t expected = byte_count(e, given);
    if (bytes != expected) {
      fail(MEGANEURA_ERROR_SHAPE_MISMATCH, quoted(name) + " as " + describe(given, e.type.shape) + " is " +
                                               std::to_string(expected) + " bytes; given " + std::to_string(bytes));
    }
    if (bytes) need(data, "data");
    const auto* p = static_cast<const std::byte*>(data);
    if (given == e.stored) {
      s.write_raw(e.name, std::span<const std::byte>(p, bytes));
      return;
    }
    std::vector<std::byte> stored(byte_count(e, e.stored));
    convert_values(given, p, e.stored, stored.data(), e.type.numel());
    s.write_raw(e.name, stored);
  });
}

meganeura_status meganeura_session_get(const meganeura_session* session, const char* name, meganeura_dtype dtype,
                                       void* data, size_t capacity, size_t* written) {
  return guard(__func__, MEGANEURA_ERROR_DEVICE, [&] {
    const Session& s = session_of(session);
    const ExternalBuffer& e = find_buffer(s, name);
    const DType want = dtype_of(dtype);
    check_dtype(e, want, "read");
    const size_t bytes = byte_count(e, want);
    if (capacity < bytes) {
      fail(MEGANEURA_ERROR_BUFFER_TOO_SMALL, quoted(name) + " as " + describe(want, e.type.shape) + " is " +
                                                 std::to_string(bytes) + " bytes; capacity " +
                                                 std::to_string(capacity));
    }
    if (bytes) need(data, "data");
    auto* p = static_cast<std::byte*>(data);
    if (want == e.stored) {
      s.read_raw(e.name, std::span<std::byte>(p, bytes));
    } else {
      std::vector<std::byte> stored = s.read_raw(e.name);
      convert_values(e.stored, stored.data(), want, p, e.type.numel());
    }
    if (written) *written = bytes;
  });
}

meganeura_status meganeura_session_run(meganeura_session* session, size_t program) {
  return guard(__func__, MEGANEURA_ERROR_DEVICE, [&] {
    Session& s = session_of(session);
    if (program >= s.program_count()) {
      fail(MEGANEURA_ERROR_INVALID_ARGUMENT,
           "no program " + std::to_string(program) + " (the session has " + std::to_string(s.program_count()) + ")");
    }
    s.run(program);
  });
}

meganeura_status meganeura_session_bind_buffer(meganeura_session* session, const char* name, uint64_t buffer,
                                               uint64_t bytes) {
  return guard(__func__, MEGANEURA_ERROR_DEVICE, [&] {
    Session& s = session_of(session);
    on_vulkan(session);
    need(name, "name");
    if (!buffer) fail(MEGANEURA_ERROR_INVALID_ARGUMENT, "buffer is VK_NULL_HANDLE");
    vulkan_bind_buffer(s.backend(), name, reinterpret_cast<void*>(uintptr_t(buffer)), bytes);
  });
}

meganeura_status meganeura_session_bind_image(meganeura_session* session, const char* name,
                                              const meganeura_vulkan_image* image) {
  return guard(__func__, MEGANEURA_ERROR_DEVICE, [&] {
    Session& s = session_of(session);
    on_vulkan(session);
    need(name, "name");
    need(image, "image");
    vulkan_bind_image(
        s.backend(), name,
        VulkanImage{image->image, image->format, image->width, image->height, image->layout, image->final_layout});
  });
}

meganeura_status meganeura_session_submit(meganeura_session* session, size_t program, size_t first_chunk,
                                          size_t chunk_count, const meganeura_vulkan_semaphore* waits,
                                          size_t wait_count, const meganeura_vulkan_semaphore* signals,
                                          size_t signal_count) {
  return guard(__func__, MEGANEURA_ERROR_DEVICE, [&] {
    Session& s = session_of(session);
    on_vulkan(session);
    if (wait_count) need(waits, "waits");
    if (signal_count) need(signals, "signals");
    VulkanSubmit sub{.first_chunk = first_chunk, .chunk_count = chunk_count, .wait = {}, .signal = {}};
    for (size_t i = 0; i < wait_count; ++i) {
      if (!waits[i].semaphore) fail(MEGANEURA_ERROR_INVALID_ARGUMENT, "waits[" + std::to_string(i) + "] is NULL");
      sub.wait.push_back(
          {waits[i].semaphore, waits[i].value, waits[i].stages ? waits[i].stages : VulkanSemaphore{}.stages});
    }
    for (size_t i = 0; i < signal_count; ++i) {
      if (!signals[i].semaphore) fail(MEGANEURA_ERROR_INVALID_ARGUMENT, "signals[" + std::to_string(i) + "] is NULL");
      sub.signal.push_back({signals[i].semaphore, signals[i].value, 0});
    }
    vulkan_submit(s, program, sub);
  });
}

meganeura_status meganeura_session_chunk_count(const meganeura_session* session, size_t program, size_t* count) {
  return guard(__func__, MEGANEURA_ERROR_INTERNAL, [&] {
    const Session& s = session_of(session);
    on_vulkan(session);
    need(count, "count");
    *count = vulkan_chunk_count(s.backend(), program);
  });
}

meganeura_status meganeura_session_poll(const meganeura_session* session, int* done) {
  return guard(__func__, MEGANEURA_ERROR_DEVICE, [&] {
    const Session& s = session_of(session);
    need(done, "done");
    *done = vulkan_run_done(s.backend()) ? 1 : 0;
  });
}

meganeura_status meganeura_session_wait(meganeura_session* session) {
  return guard(__func__, MEGANEURA_ERROR_DEVICE, [&] { vulkan_wait(session_of(session).backend()); });
}

meganeura_status meganeura_session_profile(const meganeura_session* session, size_t program,
                                           meganeura_profile* profile) {
  return guard(__func__, MEGANEURA_ERROR_INTERNAL, [&] {
    need(profile, "profile");
    const VulkanProgramProfile& p = profile_of(session, program);
    *profile = meganeura_profile{p.runs, p.step_ms, p.dispatches, p.barriers, p.launches.size()};
  });
}

meganeura_status meganeura_session_profile_launch(const meganeura_session* session, size_t program, size_t launch,
                                                  meganeura_launch_profile* out) {
  return guard(__func__, MEGANEURA_ERROR_INTERNAL, [&] {
    need(out, "out");
    const VulkanProgramProfile& p = profile_of(session, program);
    if (launch >= p.launches.size()) {
      fail(MEGANEURA_ERROR_INVALID_ARGUMENT, "no launch " + std::to_string(launch) + " (the program has " +
                                                 std::to_string(p.launches.size()) + " per run)");
    }
    const VulkanLaunchProfile& l = p.launches[launch];
    *out = meganeura_launch_profile{l.kernel.c_str(), l.op.c_str(), l.dispatch, l.ms, l.flops, l.bytes};
  });
}

}  // extern "C"
