#include "alert/telemetry.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>

#include "energy/meter.h"
#include "energy/nvml.h"

namespace meganeura::alert {

namespace {

std::string cgroup_dir() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  return {};
}

// Opens /dev/kmsg positioned at its end, so only records written during the job are read.
int open_kmsg() {
  int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) lseek(fd, 0, SEEK_END);
  return fd;
}

std::vector<std::string> read_kmsg_oom(int fd) {
  std::vector<std::string> out;
  if (fd < 0) return out;
  char buf[8192];
  for (int i = 0; i < 100000; ++i) {
    ssize_t n = read(fd, buf, sizeof buf - 1);
    if (n < 0 && errno == EPIPE) continue;  // records overwritten while we read
    if (n <= 0) break;
    std::string rec(buf, static_cast<size_t>(n));
    auto semi = rec.find(';');
    std::string msg = semi == std::string::npos ? rec : rec.substr(semi + 1);
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    if (msg.find("Out of memory: Killed process") != std::string::npos ||
        msg.find("oom-kill:") != std::string::npos ||
        msg.find("Memory cgroup out of memory") != std::string::npos)
      out.push_back(msg);
  }
  return out;
}

}  // namespace

uint64_t read_cgroup_oom_kills() {
  std::string dir = cgroup_dir();
  if (dir.empty()) return 0;
  std::ifstream in(dir + "/memory.events");
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value)
    if (key == "oom_kill") return value;
  return 0;
}

struct Telemetry::State {
  double interval_s;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  bool gpu_ok = false;
  std::string note;
  std::vector<GpuStats> gpus;
  std::vector<std::string> events;
  std::unique_ptr<energy::EnergyMeter> meter;
  std::vector<uint64_t> energy_start_mj;
  uint64_t oom_start = 0;
  int kmsg_fd = -1;

  void run() {
    std::string why;
    auto nvml = energy::Nvml::open("", &why);
    std::unique_lock lock(mu);
    if (!nvml) {
      note = why.empty() ? "NVML not available: no GPU telemetry" : "no GPU telemetry: " + why;
      cv.wait(lock, [&] { return stopping; });
      return;
    }
    unsigned count = nvml->device_count();
    if (count == 0) {
      note = "NVML found no GPU";
      cv.wait(lock, [&] { return stopping; });
      return;
    }
    gpu_ok = true;
    gpus.resize(count);
    energy_start_mj.assign(count, 0);
    bool watching = nvml->watch_events();
    bool first = true;
    while (!stopping) {
      lock.unlock();
      auto samples = nvml->sample_all();
      std::vector<energy::NvmlEvent> new_events;
      if (watching) {
        // Waiting on the event set doubles as the sampling pause.
        if (auto e = nvml->wait_event(static_cast<unsigned>(interval_s * 1000)))
          new_events.push_back(*e);
      }
      lock.lock();
      for (const auto& e : new_events)
        events.push_back(fmt::format("{} on GPU {}", e.description, e.index));
      for (const auto& s : samples) {
        if (s.index >= gpus.size()) continue;
        GpuStats& g = gpus[s.index];
        g.index = s.index;
        g.name = s.name;
        ++g.samples;
        if (s.util_gpu_pct) {
          g.last_util = *s.util_gpu_pct;
          g.util_avg += (*s.util_gpu_pct - g.util_avg) / g.samples;
          g.util_max = std::max<double>(g.util_max, *s.util_gpu_pct);
        }
        if (s.mem_used_bytes) g.mem_max_bytes = std::max(g.mem_max_bytes, *s.mem_used_bytes);
        if (s.mem_total_bytes) g.mem_total_bytes = *s.mem_total_bytes;
        if (s.temperature_c) g.temp_max_c = std::max(g.temp_max_c, *s.temperature_c);
        if (s.power_w) {
          g.power_avg_w += (*s.power_w - g.power_avg_w) / g.samples;
          g.power_max_w = std::max(g.power_max_w, *s.power_w);
        }
        if (s.total_energy_mj) {
          if (first) energy_start_mj[s.index] = *s.total_energy_mj;
          g.energy_j = static_cast<double>(*s.total_energy_mj - energy_start_mj[s.index]) / 1000.0;
        }
      }
      first = false;
      if (!watching) cv.wait_for(lock, std::chrono::duration<double>(interval_s), [&] { return stopping; });
    }
  }
};

Telemetry::Telemetry(double interval_s) : state_(std::make_unique<State>()) {
  state_->interval_s = interval_s;
}

Telemetry::~Telemetry() {
  if (state_->thread.joinable()) stop();
  if (state_->kmsg_fd >= 0) close(state_->kmsg_fd);
}

void Telemetry::start() {
  state_->oom_start = read_cgroup_oom_kills();
  state_->kmsg_fd = open_kmsg();
  state_->meter = std::make_unique<energy::EnergyMeter>();
  state_->meter->start();
  // Without the kernel driver NVML cannot work: no sampling thread, no library search,
  // which keeps short jobs on GPU-less machines cheap.
  if (access("/proc/driver/nvidia/version", F_OK) == 0 || access("/dev/nvidiactl", F_OK) == 0)
    state_->thread = std::thread([s = state_.get()] { s->run(); });
  else
    state_->note = "no NVIDIA driver on this machine (/proc/driver/nvidia is absent)";
}

TelemetryResult Telemetry::stop() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->cv.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
  TelemetryResult r;
  r.gpu_available = state_->gpu_ok;
  r.gpu_note = state_->note;
  r.gpus = state_->gpus;
  r.gpu_events = state_->events;
  if (state_->meter) {
    auto e = state_->meter->stop();
    nlohmann::json devices = nlohmann::json::array();
    for (const auto& d : e.devices)
      devices.push_back({{"name", d.name}, {"source", d.source}, {"joules", d.joules},
                         {"avg_watts", d.avg_watts}, {"peak_watts", d.peak_watts}});
    r.energy = {{"duration_s", e.duration_s}, {"total_joules", e.total_joules},
                {"devices", devices}, {"notes", e.notes}};
  }
  uint64_t oom_end = read_cgroup_oom_kills();
  r.cgroup_oom_kills = oom_end > state_->oom_start ? oom_end - state_->oom_start : 0;
  r.kernel_oom = read_kmsg_oom(state_->kmsg_fd);
  return r;
}

bool Telemetry::gpus_idle() const {
  std::lock_guard lock(state_->mu);
  if (!state_->gpu_ok) return false;
  for (const auto& g : state_->gpus)
    if (g.last_util > 5) return false;
  return true;
}

bool Telemetry::has_gpu_data() const {
  std::lock_guard lock(state_->mu);
  return state_->gpu_ok;
}

nlohmann::json to_json(const TelemetryResult& t) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : t.gpus)
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"samples", g.samples},
                    {"util_avg_pct", g.util_avg}, {"util_max_pct", g.util_max},
                    {"mem_max_bytes", g.mem_max_bytes}, {"mem_total_bytes", g.mem_total_bytes},
                    {"temp_max_c", g.temp_max_c}, {"power_avg_w", g.power_avg_w},
                    {"power_max_w", g.power_max_w}, {"energy_j", g.energy_j}});
  nlohmann::json j = {{"gpu_available", t.gpu_available}, {"gpus", gpus},
                      {"gpu_events", t.gpu_events}, {"cgroup_oom_kills", t.cgroup_oom_kills},
                      {"kernel_oom", t.kernel_oom}};
  if (!t.gpu_note.empty()) j["gpu_note"] = t.gpu_note;
  return j;
}

}  // namespace meganeura::alert
