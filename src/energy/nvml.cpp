#include "energy/nvml.h"

#include <dlfcn.h>

#include <cstring>

namespace meganeura::energy {
namespace {

// The subset of nvml.h we use, declared here so that the build needs no NVIDIA headers.
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
using nvmlEventSet_t = void*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlTimeout = 10;
constexpr uint64_t kEventSingleBitEcc = 0x1;
constexpr uint64_t kEventDoubleBitEcc = 0x2;
constexpr uint64_t kEventXid = 0x8;

struct NvmlUtilization {
  unsigned gpu, memory;
};
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlEventData {
  nvmlDevice_t device;
  unsigned long long event_type;
  unsigned long long event_data;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*get_count)(unsigned*) = nullptr;
  nvmlReturn_t (*get_handle)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*get_name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*get_util)(nvmlDevice_t, NvmlUtilization*) = nullptr;
  nvmlReturn_t (*get_memory)(nvmlDevice_t, NvmlMemory*) = nullptr;
  nvmlReturn_t (*get_temperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*get_power)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*get_energy)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*event_set_create)(nvmlEventSet_t*) = nullptr;
  nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long, nvmlEventSet_t) = nullptr;
  nvmlReturn_t (*event_set_wait)(nvmlEventSet_t, NvmlEventData*, unsigned) = nullptr;
  nvmlReturn_t (*event_set_free)(nvmlEventSet_t) = nullptr;
};

namespace {

template <typename F>
void resolve(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
}

}  // namespace

std::unique_ptr<Nvml> Nvml::open(const std::string& library, std::string* why) {
  const std::string path = library.empty() ? "libnvidia-ml.so.1" : library;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    if (why) *why = "NVML not available (" + std::string(dlerror()) + ")";
    return nullptr;
  }
  std::unique_ptr<Nvml> nvml(new Nvml());
  nvml->lib_ = lib;
  nvml->api_ = std::make_unique<Api>();
  Api& a = *nvml->api_;
  resolve(lib, "nvmlInit_v2", a.init);
  resolve(lib, "nvmlShutdown", a.shutdown);
  resolve(lib, "nvmlErrorString", a.error_string);
  resolve(lib, "nvmlDeviceGetCount_v2", a.get_count);
  resolve(lib, "nvmlDeviceGetHandleByIndex_v2", a.get_handle);
  resolve(lib, "nvmlDeviceGetName", a.get_name);
  resolve(lib, "nvmlDeviceGetUtilizationRates", a.get_util);
  resolve(lib, "nvmlDeviceGetMemoryInfo", a.get_memory);
  resolve(lib, "nvmlDeviceGetTemperature", a.get_temperature);
  resolve(lib, "nvmlDeviceGetPowerUsage", a.get_power);
  resolve(lib, "nvmlDeviceGetTotalEnergyConsumption", a.get_energy);
  resolve(lib, "nvmlEventSetCreate", a.event_set_create);
  resolve(lib, "nvmlDeviceRegisterEvents", a.register_events);
  resolve(lib, "nvmlEventSetWait_v2", a.event_set_wait);
  resolve(lib, "nvmlEventSetFree", a.event_set_free);
  if (!a.init || !a.get_count || !a.get_handle) {
    if (why) *why = "NVML library " + path + " lacks nvmlInit_v2/nvmlDeviceGetCount_v2";
    a.shutdown = nullptr;  // never initialised: the destructor only closes the library
    return nullptr;
  }
  if (nvmlReturn_t r = a.init(); r != kNvmlSuccess) {
    if (why) {
      *why = "nvmlInit_v2 failed: " + std::string(a.error_string ? a.error_string(r) : std::to_string(r).c_str());
    }
    a.shutdown = nullptr;
    return nullptr;
  }
  return nvml;
}

Nvml::~Nvml() {
  if (api_) {
    if (event_set_ && api_->event_set_free) api_->event_set_free(event_set_);
    if (api_->shutdown && api_->init) api_->shutdown();
  }
  if (lib_) dlclose(lib_);
}

unsigned Nvml::device_count() const {
  unsigned n = 0;
  return api_->get_count(&n) == kNvmlSuccess ? n : 0;
}

NvmlSample Nvml::sample(unsigned index) const {
  NvmlSample s;
  s.index = index;
  nvmlDevice_t dev = nullptr;
  if (api_->get_handle(index, &dev) != kNvmlSuccess) return s;
  if (api_->get_name) {
    char name[96] = {};
    if (api_->get_name(dev, name, sizeof(name)) == kNvmlSuccess) s.name = name;
  }
  if (NvmlUtilization u{}; api_->get_util && api_->get_util(dev, &u) == kNvmlSuccess) {
    s.util_gpu_pct = u.gpu;
    s.util_mem_pct = u.memory;
  }
  if (NvmlMemory m{}; api_->get_memory && api_->get_memory(dev, &m) == kNvmlSuccess) {
    s.mem_used_bytes = m.used;
    s.mem_total_bytes = m.total;
  }
  if (unsigned t = 0; api_->get_temperature && api_->get_temperature(dev, 0, &t) == kNvmlSuccess) {
    s.temperature_c = t;
  }
  if (unsigned mw = 0; api_->get_power && api_->get_power(dev, &mw) == kNvmlSuccess) {
    s.power_w = mw / 1000.0;
  }
  if (unsigned long long mj = 0; api_->get_energy && api_->get_energy(dev, &mj) == kNvmlSuccess) {
    s.total_energy_mj = mj;
  }
  return s;
}

std::vector<NvmlSample> Nvml::sample_all() const {
  std::vector<NvmlSample> out;
  for (unsigned i = 0, n = device_count(); i < n; ++i) out.push_back(sample(i));
  return out;
}

bool Nvml::watch_events() {
  if (event_set_) return true;
  if (!api_->event_set_create || !api_->register_events || !api_->event_set_wait) return false;
  if (api_->event_set_create(&event_set_) != kNvmlSuccess) {
    event_set_ = nullptr;
    return false;
  }
  bool any = false;
  for (unsigned i = 0, n = device_count(); i < n; ++i) {
    nvmlDevice_t dev = nullptr;
    if (api_->get_handle(i, &dev) != kNvmlSuccess) continue;
    any |= api_->register_events(dev, kEventXid | kEventDoubleBitEcc | kEventSingleBitEcc, event_set_) == kNvmlSuccess;
  }
  return any;
}

std::optional<NvmlEvent> Nvml::wait_event(unsigned timeout_ms) {
  if (!event_set_) return std::nullopt;
  NvmlEventData d{};
  nvmlReturn_t r = api_->event_set_wait(event_set_, &d, timeout_ms);
  if (r == kNvmlTimeout || r != kNvmlSuccess) return std::nullopt;
  NvmlEvent e;
  e.type = d.event_type;
  e.data = d.event_data;
  for (unsigned i = 0, n = device_count(); i < n; ++i) {
    nvmlDevice_t dev = nullptr;
    if (api_->get_handle(i, &dev) == kNvmlSuccess && dev == d.device) e.index = i;
  }
  if (e.type & kEventXid)
    e.description = "Xid " + std::to_string(e.data);
  else if (e.type & kEventDoubleBitEcc)
    e.description = "double-bit ECC error";
  else if (e.type & kEventSingleBitEcc)
    e.description = "single-bit ECC error";
  else
    e.description = "NVML event " + std::to_string(e.type);
  return e;
}

}  // namespace meganeura::energy
