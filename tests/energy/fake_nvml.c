/* A stand-in for libnvidia-ml.so.1 so that the NVML code paths run on machines without an
 * NVIDIA driver. It implements the entry points nvml.cpp resolves and is steered by
 * environment variables read at nvmlInit_v2 (and, for FAKE_NVML_STATE, at every query):
 *   FAKE_NVML_DEVICES    number of GPUs (default 1)
 *   FAKE_NVML_NAME       device name (default "NVIDIA H100 80GB HBM3")
 *   FAKE_NVML_POWER_MW   constant power draw in milliwatts (default 250000)
 *   FAKE_NVML_NO_ENERGY  when set, the total-energy counter is unsupported (pre-Volta)
 *   FAKE_NVML_NO_POWER   when set, power readings are unsupported
 *   FAKE_NVML_INIT_FAIL  when set, nvmlInit_v2 fails
 *   FAKE_NVML_XID        an Xid number delivered once by nvmlEventSetWait_v2
 *   FAKE_NVML_STATE      a file of "key=value" lines overriding power_mw, util, temp,
 *                        mem_used_mb, xid and hang while the program runs
 *   FAKE_NVML_HANG       when non-zero, power queries never return (a GPU that fell off
 *                        the bus can hang the driver like this)
 * The energy counter integrates the reported power over real time since initialisation,
 * as the driver's counter does, so integrating and counting give the same joules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
typedef void* nvmlDevice_t;
typedef void* nvmlEventSet_t;
typedef struct { unsigned gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned gpuInstanceId;
  unsigned computeInstanceId;
} nvmlEventData_t;

enum { kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3, kTimeout = 10,
       kUnknown = 999 };
enum { kMaxDevices = 16 };

static int g_devices = 1;
static int g_initialised = 0;
static double g_t0 = 0;
static char g_name[96] = "NVIDIA H100 80GB HBM3";
static unsigned g_handles[kMaxDevices];
static int g_xid_delivered = 0;
static int g_events = 0;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads `key` from the state file, else from the environment variable `env`, else fallback. */
static long long setting(const char* key, const char* env, long long fallback) {
  const char* path = getenv("FAKE_NVML_STATE");
  if (path) {
    FILE* f = fopen(path, "r");
    if (f) {
      char line[256];
      size_t n = strlen(key);
      while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, n) == 0 && line[n] == '=') {
          fclose(f);
          return atoll(line + n + 1);
        }
      }
      fclose(f);
    }
  }
  const char* v = env ? getenv(env) : NULL;
  return v ? atoll(v) : fallback;
}

static int index_of(nvmlDevice_t d) {
  for (int i = 0; i < g_devices; ++i) {
    if (d == &g_handles[i]) return i;
  }
  return -1;
}

nvmlReturn_t nvmlInit_v2(void) {
  if (getenv("FAKE_NVML_INIT_FAIL")) return kUnknown;
  g_devices = (int)setting("devices", "FAKE_NVML_DEVICES", 1);
  if (g_devices < 0) g_devices = 0;
  if (g_devices > kMaxDevices) g_devices = kMaxDevices;
  const char* name = getenv("FAKE_NVML_NAME");
  if (name) snprintf(g_name, sizeof g_name, "%s", name);
  g_t0 = now_s();
  g_xid_delivered = 0;
  g_initialised = 1;
  return kSuccess;
}

nvmlReturn_t nvmlShutdown(void) {
  g_initialised = 0;
  return kSuccess;
}

const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case kTimeout: return "Timeout";
    default: return "Unknown Error";
  }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  if (!g_initialised) return kUninitialized;
  if (!count) return kInvalidArgument;
  *count = (unsigned)g_devices;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  if (!g_initialised) return kUninitialized;
  if (!device || index >= (unsigned)g_devices) return kInvalidArgument;
  *device = &g_handles[index];
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  if (index_of(device) < 0 || !name || length == 0) return kInvalidArgument;
  snprintf(name, length, "%s", g_name);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* u) {
  if (index_of(device) < 0 || !u) return kInvalidArgument;
  u->gpu = (unsigned)setting("util", "FAKE_NVML_UTIL", 50);
  u->memory = u->gpu / 2;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* m) {
  if (index_of(device) < 0 || !m) return kInvalidArgument;
  m->total = 80ull << 30;
  m->used = (unsigned long long)setting("mem_used_mb", "FAKE_NVML_MEM_USED_MB", 1024) << 20;
  m->free = m->total > m->used ? m->total - m->used : 0;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned* t) {
  if (index_of(device) < 0 || !t || sensor != 0) return kInvalidArgument;
  *t = (unsigned)setting("temp", "FAKE_NVML_TEMP", 45);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned* mw) {
  if (index_of(device) < 0 || !mw) return kInvalidArgument;
  if (getenv("FAKE_NVML_NO_POWER")) return kNotSupported;
  while (setting("hang", "FAKE_NVML_HANG", 0) != 0) {
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
  }
  *mw = (unsigned)setting("power_mw", "FAKE_NVML_POWER_MW", 250000);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* mj) {
  if (index_of(device) < 0 || !mj) return kInvalidArgument;
  if (getenv("FAKE_NVML_NO_ENERGY")) return kNotSupported;
  /* A large offset, as after days of uptime, so that callers must take differences. */
  const double watts = setting("power_mw", "FAKE_NVML_POWER_MW", 250000) / 1000.0;
  *mj = 5000000000ull + (unsigned long long)(watts * (now_s() - g_t0) * 1000.0);
  return kSuccess;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (!set) return kInvalidArgument;
  *set = &g_events;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
  (void)types;
  if (index_of(device) < 0 || set != &g_events) return kInvalidArgument;
  return kSuccess;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned timeout_ms) {
  if (set != &g_events || !data) return kInvalidArgument;
  const long long xid = setting("xid", "FAKE_NVML_XID", 0);
  if (xid > 0 && !g_xid_delivered && g_devices > 0) {
    g_xid_delivered = 1;
    memset(data, 0, sizeof *data);
    data->device = &g_handles[0];
    data->eventType = 0x8; /* nvmlEventTypeXidCriticalError */
    data->eventData = (unsigned long long)xid;
    return kSuccess;
  }
  struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  return kTimeout;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  return set == &g_events ? kSuccess : kInvalidArgument;
}
