// gpualert-gpu: GPU telemetry for one job, in its own process. gpualert starts it only on
// machines with the NVIDIA driver; it loads NVML, then writes one JSON object a line to
// stdout: an "init" line, a "sample" line per GPU every interval, and an "event" line per
// Xid or ECC error as the driver reports it. It ends when its stdin reaches end of file
// (after one last sample, so the energy counter covers the whole job) or when gpualert
// dies. Keeping NVML out of gpualert means a driver call that hangs (a GPU that fell off
// the bus) can stall only this process, which gpualert kills at its deadline, and lets
// gpualert itself be a static binary that starts fast.
//
//   gpualert-gpu [--interval SECONDS] [--nvml-library PATH]
#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>

#include "energy/nvml.h"

namespace {

std::mutex g_out;

void emit(const nlohmann::json& j) {
  std::lock_guard lock(g_out);
  std::string line = j.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

double mono_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void emit_samples(const meganeura::energy::Nvml& nvml) {
  const double t = mono_s();
  for (const auto& s : nvml.sample_all()) {
    nlohmann::json j = {{"type", "sample"}, {"t", t}, {"index", s.index}, {"name", s.name}};
    if (s.util_gpu_pct) j["util"] = *s.util_gpu_pct;
    if (s.mem_used_bytes) j["mem_used"] = *s.mem_used_bytes;
    if (s.mem_total_bytes) j["mem_total"] = *s.mem_total_bytes;
    if (s.temperature_c) j["temp"] = *s.temperature_c;
    if (s.power_w) j["power_w"] = *s.power_w;
    if (s.total_energy_mj) j["energy_mj"] = *s.total_energy_mj;
    emit(j);
  }
}

}  // namespace

int main(int argc, char** argv) {
  double interval_s = 1.0;
  std::string library;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--interval" && i + 1 < argc) {
      interval_s = std::atof(argv[++i]);
    } else if (a == "--nvml-library" && i + 1 < argc) {
      library = argv[++i];
    } else {
      std::fprintf(stderr, "usage: gpualert-gpu [--interval SECONDS] [--nvml-library PATH]\n");
      return 2;
    }
  }
  if (!(interval_s >= 0.01)) interval_s = 1.0;
  // Never outlive gpualert, even when it is killed with SIGKILL.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 0;

  std::string why;
  auto nvml = meganeura::energy::Nvml::open(library, &why);
  if (!nvml) {
    emit({{"type", "init"}, {"ok", false}, {"why", why.empty() ? "NVML not available" : why}});
    return 0;
  }
  const unsigned count = nvml->device_count();
  emit({{"type", "init"}, {"ok", count > 0}, {"count", count}, {"why", count > 0 ? "" : "NVML found no GPU"}});
  if (count == 0) return 0;

  if (nvml->watch_events()) {
    std::thread([&nvml] {
      for (;;) {
        if (auto e = nvml->wait_event(500))
          emit({{"type", "event"}, {"index", e->index}, {"description", e->description}});
      }
    }).detach();
  }
  const int wait_ms = static_cast<int>(interval_s * 1000);
  for (;;) {
    emit_samples(*nvml);
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (poll(&p, 1, wait_ms) > 0) {
      char buf[256];
      if (read(STDIN_FILENO, buf, sizeof buf) <= 0) break;  // gpualert is done with us
    }
  }
  emit_samples(*nvml);
  std::fflush(stdout);
  _exit(0);  // the event thread may still be inside the driver
}
