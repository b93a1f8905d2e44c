#include "energy/rapl.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

namespace meganeura::energy {
namespace fs = std::filesystem;

namespace {

std::optional<std::string> read_line(const fs::path& p, int* error = nullptr) {
  std::ifstream in(p);
  if (!in) {
    if (error) *error = errno;
    return std::nullopt;
  }
  std::string s;
  std::getline(in, s);
  if (error) *error = in.bad() ? EIO : 0;
  return s;
}

std::optional<uint64_t> parse_u64(const std::optional<std::string>& s) {
  if (!s || s->empty()) return std::nullopt;
  try {
    size_t used = 0;
    const unsigned long long v = std::stoull(*s, &used);
    if (used != s->size() && s->find_first_not_of(" \n\r\t", used) != std::string::npos) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool is_rapl_zone(const std::string& dir) {
  // intel-rapl-mmio duplicates the package domains through MMIO: reading both double counts.
  return (dir.rfind("intel-rapl:", 0) == 0 || dir.rfind("amd-rapl:", 0) == 0);
}

}  // namespace

std::vector<RaplDomain> discover_rapl(const std::string& root, std::vector<std::string>* notes) {
  std::vector<RaplDomain> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    if (notes) notes->push_back("RAPL: no powercap tree at " + root);
    return out;
  }
  // Zones are both top-level (intel-rapl:0) and nested (intel-rapl:0/intel-rapl:0:2); sysfs
  // exposes the nested ones at the top level as well, so collect unique zone names.
  std::map<std::string, fs::path> zones;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::follow_directory_symlink, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string dir = it->path().filename().string();
    if (it.depth() > 2) it.disable_recursion_pending();
    if (is_rapl_zone(dir) && fs::is_directory(it->path())) zones.emplace(dir, it->path());
  }
  bool denied = false;
  std::map<std::string, int> dram_count;
  for (const auto& [zone, path] : zones) {
    const std::optional<std::string> name = read_line(path / "name");
    if (!name) continue;
    RaplDomain d;
    if (name->rfind("package", 0) == 0) {
      d.name = *name;
    } else if (*name == "dram") {
      // DRAM zones are all called "dram": name them after their package (intel-rapl:P:n).
      const std::string parent = zone.substr(0, zone.rfind(':'));
      const std::string package = parent.substr(parent.find(':') + 1);
      d.name = "dram-" + package;
    } else if (*name == "psys") {
      d.name = "psys";
      d.in_total = false;
    } else {
      continue;  // core, uncore: already inside their package
    }
    d.energy_path = (path / "energy_uj").string();
    d.max_range_uj = parse_u64(read_line(path / "max_energy_range_uj")).value_or(0);
    int err = 0;
    const std::optional<std::string> value = read_line(d.energy_path, &err);
    if (!value) {
      if (err == EACCES || err == EPERM) {
        denied = true;
      } else if (notes) {
        notes->push_back("RAPL: cannot read " + d.energy_path + ": " + std::strerror(err));
      }
      continue;
    }
    if (!parse_u64(value)) {
      if (notes) notes->push_back("RAPL: " + d.energy_path + " does not hold a counter");
      continue;
    }
    out.push_back(d);
  }
  if (denied && notes) {
    notes->push_back("RAPL counters under " + root +
                     " are root-only (kernel 5.10 and newer): run as root or make energy_uj "
                     "readable to measure CPU and DRAM energy");
  }
  std::sort(out.begin(), out.end(), [](const RaplDomain& a, const RaplDomain& b) { return a.name < b.name; });
  return out;
}

std::optional<uint64_t> read_rapl_uj(const RaplDomain& d) { return parse_u64(read_line(d.energy_path)); }

uint64_t rapl_delta_uj(uint64_t before, uint64_t after, uint64_t max_range_uj) {
  if (after >= before) return after - before;
  // Wrapped: the counter ran up to max_range and restarted at zero.
  return max_range_uj >= before ? (max_range_uj - before) + after : after;
}

}  // namespace meganeura::energy
