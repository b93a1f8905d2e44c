#include "energy/meter.h"

#include <chrono>

namespace meganeura::energy {

struct EnergyMeter::State {
  std::chrono::steady_clock::time_point t0;
};

EnergyMeter::EnergyMeter(MeterOptions options)
    : options_(std::move(options)), state_(std::make_unique<State>()) {}
EnergyMeter::~EnergyMeter() = default;

void EnergyMeter::start() { state_->t0 = std::chrono::steady_clock::now(); }

EnergyReading EnergyMeter::stop() {
  EnergyReading r;
  r.duration_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - state_->t0).count();
  r.notes.push_back("wall clock only: no energy source available");
  return r;
}

}  // namespace meganeura::energy
