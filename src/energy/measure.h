// Runs a command under the energy meters: what `meganeura energy measure -- CMD` and the job
// monitor use to report what a job consumed.
#pragma once

#include <string>
#include <vector>

#include "energy/meter.h"

namespace meganeura::energy {

struct MeasureResult {
  int exit_code = 0;    // the command's status; 128 + signal when killed by one
  std::string failure;  // non-empty when the command could not be started
  EnergyReading reading;
};

// Starts the meters, runs `argv` (searched on PATH) with the caller's stdio, waits, stops the
// meters. SIGINT and SIGTERM received meanwhile are forwarded to the command. A command that
// cannot be executed exits 127 (not found) or 126 (not executable), as in a shell.
MeasureResult measure_command(const std::vector<std::string>& argv, const MeterOptions& options = {});

}  // namespace meganeura::energy
