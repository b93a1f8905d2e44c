// Intel/AMD RAPL energy counters read through the Linux powercap sysfs tree
// (/sys/class/powercap/intel-rapl:*). Every package and DRAM domain is read; core and uncore
// are parts of their package and psys contains the packages, so neither is ever added to the
// host total. Counters are in microjoules and wrap at max_energy_range_uj.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meganeura::energy {

struct RaplDomain {
  std::string name;         // "package-0", "dram-0", "psys"
  std::string energy_path;  // .../energy_uj
  uint64_t max_range_uj = 0;
  bool in_total = true;  // false for psys (it already contains the packages)
};

// Finds the domains under `root`. Notes explain what was skipped, including the hint that the
// counters are root-only when they exist but cannot be read.
std::vector<RaplDomain> discover_rapl(const std::string& root, std::vector<std::string>* notes);

// Reads a counter; empty when the file cannot be read or parsed.
std::optional<uint64_t> read_rapl_uj(const RaplDomain& d);

// Energy between two readings of a counter that wraps at `max_range_uj` (at most one wrap
// between readings; callers poll often enough for that to hold).
uint64_t rapl_delta_uj(uint64_t before, uint64_t after, uint64_t max_range_uj);

}  // namespace meganeura::energy
