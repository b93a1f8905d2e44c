#include "alert/telemetry.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "alert/util.h"
#include "common/process.h"
#include "energy/meter.h"

namespace meganeura::alert {

namespace {

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
    if (msg.find("Out of memory: Killed process") != std::string::npos || msg.find("oom-kill:") != std::string::npos ||
        msg.find("Memory cgroup out of memory") != std::string::npos)
      out.push_back(msg);
  }
  return out;
}

}  // namespace

std::string cgroup_v2_dir(std::string_view proc_self_cgroup) {
  for (std::string_view rest = proc_self_cgroup; !rest.empty();)
    if (auto line = next_line(rest); line.substr(0, 3) == "0::") return "/sys/fs/cgroup" + std::string(line.substr(3));
  return {};
}

uint64_t parse_oom_kills(std::string_view memory_events) {
  for (std::string_view rest = memory_events; !rest.empty();)
    if (auto line = next_line(rest); line.substr(0, 9) == "oom_kill ")
      return std::strtoull(std::string(line.substr(9)).c_str(), nullptr, 10);
  return 0;
}

namespace {

// The oom_kill count of the cgroup v2 directory `dir` (0 when unreadable).
uint64_t cgroup_oom_kills(const std::string& dir) {
  if (dir.empty()) return 0;
  auto events = read_file(dir + "/memory.events");
  return events ? parse_oom_kills(*events) : 0;
}

std::string own_cgroup_dir() {
  auto self = read_file("/proc/self/cgroup");
  return self ? cgroup_v2_dir(*self) : std::string();
}

}  // namespace

struct Telemetry::State {
  double interval_s = 1;
  std::string helper_exe;
  std::mutex mu;
  std::condition_variable cv;
  bool helper_done = true;  // the reader saw end of file (or no helper was started)
  bool gpu_ok = false;
  std::string note;
  std::vector<GpuStats> gpus;
  // What energy needs beyond GpuStats, per GPU: the first counter reading, or the last power
  // sample (t, watts) for the trapezoid rule; and the span the samples cover.
  struct Energy {
    std::optional<uint64_t> first_mj;
    std::optional<std::pair<double, double>> last_power;
    double integrated_j = 0, first_t = 0, last_t = 0;
  };
  std::vector<Energy> energy;
  std::vector<std::string> events;
  std::unique_ptr<energy::EnergyMeter> meter;
  std::string cgroup;  // this process's cgroup v2 directory, read once
  uint64_t oom_start = 0;
  int kmsg_fd = -1;
  bool armed = false;
  pid_t helper = -1;
  int helper_in = -1;  // its stdin: closing it asks for a last sample and an exit
  std::thread reader;

  void on_line(const std::string& line) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) return;
    std::string type = j.value("type", "");
    std::lock_guard lock(mu);
    if (type == "init") {
      gpu_ok = j.value("ok", false);
      if (!gpu_ok) note = "no GPU telemetry: " + j.value("why", std::string("NVML failed"));
      return;
    }
    if (type == "event") {
      events.push_back(fmt::format("{} on GPU {}", j.value("description", std::string("event")), j.value("index", 0u)));
      return;
    }
    if (type != "sample") return;
    unsigned i = j.value("index", 0u);
    if (i >= 64) return;
    if (i >= gpus.size()) {
      gpus.resize(i + 1);
      energy.resize(i + 1);
    }
    GpuStats& g = gpus[i];
    Energy& e = energy[i];
    const double t = j.value("t", 0.0);
    g.index = i;
    g.name = j.value("name", std::string());
    if (++g.samples == 1) e.first_t = t;
    e.last_t = t;
    if (j.contains("util")) {
      g.last_util = j["util"].get<unsigned>();
      g.util_avg += (g.last_util - g.util_avg) / g.samples;
      g.util_max = std::max<double>(g.util_max, g.last_util);
    }
    if (j.contains("mem_used")) g.mem_max_bytes = std::max(g.mem_max_bytes, j["mem_used"].get<uint64_t>());
    if (j.contains("mem_total")) g.mem_total_bytes = j["mem_total"].get<uint64_t>();
    if (j.contains("temp")) g.temp_max_c = std::max(g.temp_max_c, j["temp"].get<unsigned>());
    if (j.contains("power_w")) {
      double w = j["power_w"].get<double>();
      g.power_avg_w += (w - g.power_avg_w) / g.samples;
      g.power_max_w = std::max(g.power_max_w, w);
      if (e.last_power) e.integrated_j += (t - e.last_power->first) * (w + e.last_power->second) / 2;
      e.last_power = std::pair{t, w};
    }
    if (j.contains("energy_mj")) {
      auto mj = j["energy_mj"].get<uint64_t>();
      if (!e.first_mj) e.first_mj = mj;
      g.energy_j = static_cast<double>(mj - *e.first_mj) / 1000.0;
    } else {
      g.energy_j = e.integrated_j;
    }
  }

  void read_lines(int fd) {
    std::string pending;
    char buf[4096];
    for (;;) {
      ssize_t n = read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      pending.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        try {
          on_line(pending.substr(0, nl));
        } catch (const std::exception&) {
          // A line of the wrong shape is dropped; it must not end the wrapper.
        }
        pending.erase(0, nl + 1);
      }
    }
    close(fd);
    std::lock_guard lock(mu);
    helper_done = true;
    cv.notify_all();
  }

  // Starts gpualert-gpu with a pipe on each side, in its own process group so that a
  // Ctrl-C meant for the job does not end the sampling.
  void start_helper(const std::string& library) {
    int to_helper[2], from_helper[2];
    if (pipe2(to_helper, O_CLOEXEC) != 0) throw std::runtime_error(std::strerror(errno));
    if (pipe2(from_helper, O_CLOEXEC) != 0) {
      close(to_helper[0]);
      close(to_helper[1]);
      throw std::runtime_error(std::strerror(errno));
    }
    std::vector<std::string> args = {helper_exe, "--interval", fmt::format("{:.3f}", interval_s)};
    if (!library.empty()) args.insert(args.end(), {"--nvml-library", library});
    const int rc = common::spawn({.argv = std::move(args),
                                  .in = {to_helper[0], ""},
                                  .out = {from_helper[1], ""},
                                  .err = {-1, "/dev/null"},
                                  .own_process_group = true},
                                 &helper);
    close(to_helper[0]);
    close(from_helper[1]);
    if (rc != 0) {
      helper = -1;
      close(to_helper[1]);
      close(from_helper[0]);
      note = fmt::format("no GPU telemetry: cannot start {}: {}", helper_exe, std::strerror(rc));
      return;
    }
    helper_in = to_helper[1];
    helper_done = false;
    reader = std::thread([this, fd = from_helper[0]] { read_lines(fd); });
  }

  // Asks the helper for its last sample, waits at most `deadline_s`, then kills it.
  void stop_helper(double deadline_s) {
    if (helper < 0) return;
    close(helper_in);
    helper_in = -1;
    {
      std::unique_lock lock(mu);
      if (!cv.wait_for(lock, std::chrono::duration<double>(deadline_s), [&] { return helper_done; })) {
        kill(helper, SIGKILL);
        note = fmt::format(
            "GPU telemetry helper did not stop within {:.0f} s (a hung driver?); "
            "samples up to then are kept",
            deadline_s);
      }
    }
    reader.join();  // the helper is gone, so its end of the pipe is closed
    waitpid(helper, nullptr, 0);
    helper = -1;
  }
};

Telemetry::Telemetry(double interval_s, std::string helper_exe) : state_(std::make_unique<State>()) {
  state_->interval_s = interval_s;
  state_->helper_exe = std::move(helper_exe);
}

Telemetry::~Telemetry() {
  if (state_->helper >= 0) state_->stop_helper(0);
  if (state_->kmsg_fd >= 0) close(state_->kmsg_fd);
}

void Telemetry::arm() {
  if (state_->armed) return;
  state_->armed = true;
  state_->cgroup = own_cgroup_dir();
  state_->oom_start = cgroup_oom_kills(state_->cgroup);
  state_->kmsg_fd = open_kmsg();
}

void Telemetry::start() {
  arm();
  // Energy of the host (RAPL); the GPUs' energy comes from the helper's samples.
  state_->meter = std::make_unique<energy::EnergyMeter>(energy::MeterOptions{});
  state_->meter->start();
  // Without the kernel driver NVML cannot work: no helper, no library search, which keeps
  // short jobs on GPU-less machines cheap. GPUALERT_NVML_LIBRARY names another library
  // (and starts the helper whatever the driver check says).
  const char* library = std::getenv("GPUALERT_NVML_LIBRARY");
  const bool driver = access("/proc/driver/nvidia/version", F_OK) == 0 || access("/dev/nvidiactl", F_OK) == 0;
  if (!driver && (library == nullptr || *library == '\0')) {
    state_->note = "no NVIDIA driver on this machine (/proc/driver/nvidia is absent)";
    return;
  }
  if (state_->helper_exe.empty()) {
    state_->note = "no GPU telemetry: helper not configured";
    return;
  }
  state_->start_helper(library ? library : "");
}

TelemetryResult Telemetry::stop() {
  state_->stop_helper(kHelperStopDeadlineS);
  TelemetryResult r;
  std::lock_guard lock(state_->mu);
  r.gpu_available = state_->gpu_ok && !state_->gpus.empty();
  r.gpu_note = state_->note;
  if (state_->gpu_ok && state_->gpus.empty() && r.gpu_note.empty()) r.gpu_note = "no GPU sample arrived";
  r.gpus = state_->gpus;
  r.gpu_events = state_->events;
  if (state_->meter) {
    auto e = state_->meter->stop();
    nlohmann::json devices = nlohmann::json::array();
    double total = e.total_joules;
    for (const auto& d : e.devices)
      devices.push_back({{"name", d.name},
                         {"source", d.source},
                         {"joules", d.joules},
                         {"avg_watts", d.avg_watts},
                         {"peak_watts", d.peak_watts}});
    for (size_t i = 0; i < state_->gpus.size(); ++i) {
      const GpuStats& g = state_->gpus[i];
      const auto& e = state_->energy[i];
      const bool counter = e.first_mj.has_value();
      if (g.samples == 0 || (!counter && !e.last_power)) continue;
      double span = e.last_t - e.first_t;
      devices.push_back({{"name", fmt::format("gpu{}{}{}", i, g.name.empty() ? "" : " ", g.name)},
                         {"source", counter ? "nvml-energy" : "nvml-power"},
                         {"joules", g.energy_j},
                         {"avg_watts", span > 0 ? g.energy_j / span : g.power_avg_w},
                         {"peak_watts", g.power_max_w}});
      total += g.energy_j;
    }
    std::vector<std::string> notes = e.notes;
    if (devices.size() > e.devices.size())
      std::erase_if(notes, [](const std::string& n) { return n.rfind("wall clock only", 0) == 0; });
    r.energy = {{"duration_s", e.duration_s}, {"total_joules", total}, {"devices", devices}, {"notes", notes}};
  }
  uint64_t oom_end = cgroup_oom_kills(state_->cgroup);
  r.cgroup_oom_kills = oom_end > state_->oom_start ? oom_end - state_->oom_start : 0;
  r.kernel_oom = read_kmsg_oom(state_->kmsg_fd);
  return r;
}

bool Telemetry::gpus_idle() const {
  std::lock_guard lock(state_->mu);
  if (!state_->gpu_ok || state_->gpus.empty()) return false;
  for (const auto& g : state_->gpus)
    if (g.last_util > 5) return false;
  return true;
}

bool Telemetry::has_gpu_data() const {
  std::lock_guard lock(state_->mu);
  return state_->gpu_ok && !state_->gpus.empty();
}

nlohmann::json to_json(const TelemetryResult& t) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : t.gpus)
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"samples", g.samples},
                    {"util_avg_pct", g.util_avg},
                    {"util_max_pct", g.util_max},
                    {"mem_max_bytes", g.mem_max_bytes},
                    {"mem_total_bytes", g.mem_total_bytes},
                    {"temp_max_c", g.temp_max_c},
                    {"power_avg_w", g.power_avg_w},
                    {"power_max_w", g.power_max_w},
                    {"energy_j", g.energy_j}});
  nlohmann::json j = {{"gpu_available", t.gpu_available},
                      {"gpus", gpus},
                      {"gpu_events", t.gpu_events},
                      {"cgroup_oom_kills", t.cgroup_oom_kills},
                      {"kernel_oom", t.kernel_oom}};
  if (!t.gpu_note.empty()) j["gpu_note"] = t.gpu_note;
  return j;
}

}  // namespace meganeura::alert
