#include "energy/meter.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "energy/nvml.h"
#include "energy/rapl.h"

namespace meganeura::energy {
namespace {

using Clock = std::chrono::steady_clock;

enum class Kind { kNvmlCounter, kNvmlPower, kRapl };

struct Channel {
  Kind kind;
  DeviceEnergy out;
  unsigned nvml_index = 0;
  RaplDomain rapl;
  uint64_t first = 0, last = 0;  // counter readings (mJ for NVML, uJ for RAPL)
  double accumulated_j = 0;      // RAPL deltas, or integrated power
  double last_w = 0;
  Clock::time_point last_t;
  bool primed = false;
};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

struct EnergyMeter::State {
  Clock::time_point t0;
  std::unique_ptr<Nvml> nvml;
  std::vector<Channel> channels;
  std::vector<std::string> notes;
  std::thread sampler;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  bool running = false;

  void poll(Channel& c, Clock::time_point now) {
    const double dt = c.primed ? seconds(now - c.last_t) : 0;
    switch (c.kind) {
      case Kind::kNvmlCounter:
      case Kind::kNvmlPower: {
        const NvmlSample s = nvml->sample(c.nvml_index);
        if (c.kind == Kind::kNvmlCounter && s.total_energy_mj) {
          if (!c.primed) c.first = *s.total_energy_mj;
          c.last = *s.total_energy_mj;
        }
        if (s.power_w) {
          // Trapezoids between polls; the counter path only uses power for the peak.
          if (c.kind == Kind::kNvmlPower && c.primed) c.accumulated_j += 0.5 * (c.last_w + *s.power_w) * dt;
          c.last_w = *s.power_w;
          c.out.peak_watts = std::max(c.out.peak_watts, *s.power_w);
        }
        break;
      }
      case Kind::kRapl: {
        const std::optional<uint64_t> v = read_rapl_uj(c.rapl);
        if (!v) return;
        if (c.primed) {
          const uint64_t d = rapl_delta_uj(c.last, *v, c.rapl.max_range_uj);
          c.accumulated_j += d * 1e-6;
          if (dt > 0) c.out.peak_watts = std::max(c.out.peak_watts, d * 1e-6 / dt);
        }
        c.last = *v;
        break;
      }
    }
    c.last_t = now;
    c.primed = true;
  }

  void poll_all() {
    const Clock::time_point now = Clock::now();
    for (Channel& c : channels) poll(c, now);
  }
};

EnergyMeter::EnergyMeter(MeterOptions options) : options_(std::move(options)), state_(std::make_unique<State>()) {}

EnergyMeter::~EnergyMeter() {
  if (state_ && state_->running) stop();
}

void EnergyMeter::start() {
  if (state_->running) stop();
  state_ = std::make_unique<State>();
  State& s = *state_;
  if (options_.open_nvml != nullptr) {
    std::string why;
    s.nvml = options_.open_nvml(options_.nvml_library, &why);
    if (!s.nvml) {
      s.notes.push_back(why);
    } else {
      for (const NvmlSample& g : s.nvml->sample_all()) {
        Channel c;
        c.nvml_index = g.index;
        c.out.name = "gpu" + std::to_string(g.index) + (g.name.empty() ? "" : " " + g.name);
        if (g.total_energy_mj) {
          c.kind = Kind::kNvmlCounter;
          c.out.source = "nvml-energy";
        } else if (g.power_w) {
          c.kind = Kind::kNvmlPower;
          c.out.source = "nvml-power";
        } else {
          s.notes.push_back(c.out.name + ": NVML reports neither energy nor power");
          continue;
        }
        s.channels.push_back(c);
      }
    }
  }
  if (options_.use_rapl) {
    for (const RaplDomain& d : discover_rapl(options_.powercap_root, &s.notes)) {
      Channel c;
      c.kind = Kind::kRapl;
      c.rapl = d;
      c.out.name = d.name;
      c.out.source = "rapl";
      c.out.in_total = d.in_total;
      s.channels.push_back(c);
    }
  }
  if (s.channels.empty()) s.notes.push_back("wall clock only: no energy source available");
  s.t0 = Clock::now();
  s.poll_all();
  s.running = true;
  if (!s.channels.empty()) {
    const auto period = std::chrono::duration<double>(1.0 / std::max(10.0, options_.sample_hz));
    s.sampler = std::thread([&s, period] {
      std::unique_lock<std::mutex> lock(s.mu);
      while (!s.cv.wait_for(lock, period, [&s] { return s.stopping; })) s.poll_all();
    });
  }
}

EnergyReading EnergyMeter::stop() {
  State& s = *state_;
  EnergyReading r;
  if (!s.running) {
    r.notes.push_back("meter was not started");
    return r;
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stopping = true;
  }
  s.cv.notify_all();
  if (s.sampler.joinable()) s.sampler.join();
  s.poll_all();
  s.running = false;
  r.duration_s = seconds(Clock::now() - s.t0);
  for (Channel& c : s.channels) {
    DeviceEnergy d = c.out;
    if (c.kind == Kind::kNvmlCounter && c.last < c.first) {
      r.notes.push_back(d.name + ": energy counter went backwards (driver reloaded?); energy unknown");
    }
    d.joules = c.kind == Kind::kNvmlCounter ? (c.last >= c.first ? (c.last - c.first) * 1e-3 : 0) : c.accumulated_j;
    d.avg_watts = r.duration_s > 0 ? d.joules / r.duration_s : 0;
    // A run shorter than one poll leaves no peak sample: the average is the best bound.
    d.peak_watts = std::max(d.peak_watts, d.avg_watts);
    if (d.in_total) r.total_joules += d.joules;
    r.devices.push_back(d);
  }
  r.notes.insert(r.notes.begin(), s.notes.begin(), s.notes.end());
  return r;
}

}  // namespace meganeura::energy
