#include "energy/hardware.h"

#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace meganeura::energy {
namespace fs = std::filesystem;

namespace {

// Lower-case with spaces, dashes and underscores removed, so "RTX 2080 Ti" == "rtx-2080-ti".
std::string normalise(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == ' ' || c == '-' || c == '_') continue;
    out += static_cast<char>(std::tolower(c));
  }
  return out;
}

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  throw std::runtime_error("[energy] " + origin + ": " + what);
}

double number(const toml::table& t, const std::string& key, const std::string& origin, const std::string& where,
              bool required = true, double fallback = 0) {
  const toml::node* n = t.get(key);
  if (!n) {
    if (required) bad(origin, where + " lacks '" + key + "'");
    return fallback;
  }
  std::optional<double> v = n->value<double>();
  if (!v || !std::isfinite(*v) || *v < 0) bad(origin, where + "." + key + " must be a number >= 0");
  return *v;
}

std::string text(const toml::table& t, const std::string& key) {
  return t.get(key) ? t.get(key)->value_or(std::string()) : std::string();
}

DeviceSpec parse_device(const std::string& key, const toml::table& t, const std::string& origin) {
  DeviceSpec d;
  d.key = key;
  d.name = text(t, "name");
  if (d.name.empty()) bad(origin, "device '" + key + "' lacks 'name'");
  d.arch = text(t, "arch");
  if (const toml::array* a = t.get_as<toml::array>("aliases")) {
    for (const toml::node& n : *a) d.aliases.push_back(n.value_or(std::string()));
  }
  const toml::table* peaks = t.get_as<toml::table>("peak_tflops");
  if (!peaks || peaks->empty()) bad(origin, "device '" + key + "' lacks 'peak_tflops'");
  for (const auto& [dtype, v] : *peaks) {
    std::optional<double> x = v.value<double>();
    if (!x || !(*x > 0)) bad(origin, key + ".peak_tflops." + std::string(dtype.str()) + " must be > 0");
    d.peak_tflops[std::string(dtype.str())] = *x;
  }
  d.memory_bandwidth_gbs = number(t, "memory_bandwidth_gbs", origin, key);
  d.memory_gb = number(t, "memory_gb", origin, key, false);
  d.idle_w = number(t, "idle_w", origin, key);
  d.max_w = number(t, "max_w", origin, key);
  if (d.max_w <= d.idle_w) bad(origin, key + ".max_w must exceed idle_w");
  if (d.memory_bandwidth_gbs <= 0) bad(origin, key + ".memory_bandwidth_gbs must be > 0");
  d.link = text(t, "link");
  d.link_gbs = number(t, "link_gbs", origin, key);
  d.pcie_gbs = number(t, "pcie_gbs", origin, key, false, d.link_gbs);
  if (t.get("e_flop_pj")) d.e_flop_pj = number(t, "e_flop_pj", origin, key);
  if (t.get("e_byte_pj")) d.e_byte_pj = number(t, "e_byte_pj", origin, key);
  if (const toml::table* src = t.get_as<toml::table>("source")) {
    for (const auto& [field, v] : *src) d.sources[std::string(field.str())] = v.value_or(std::string());
  }
  // A number without a citation is a number nobody can check.
  for (const char* field : {"peak_tflops", "memory_bandwidth_gbs", "max_w", "idle_w", "link_gbs"}) {
    if (!d.sources.count(field)) bad(origin, key + " has no source for '" + field + "'");
  }
  return d;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("[energy] cannot read hardware table " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

double DeviceSpec::peak_flops(const std::string& dtype) const {
  auto it = peak_tflops.find(dtype);
  if (it == peak_tflops.end() && dtype == "bf16") it = peak_tflops.find("fp16");
  if (it == peak_tflops.end()) {
    std::string known;
    for (const auto& [k, v] : peak_tflops) known += (known.empty() ? "" : ", ") + k;
    throw std::invalid_argument("[energy] " + key + " has no peak rate for dtype '" + dtype + "' (table lists " +
                                known + ")");
  }
  return it->second * 1e12;
}

double DeviceSpec::joules_per_flop(const std::string& dtype) const {
  if (e_flop_pj) return *e_flop_pj * 1e-12;
  return 0.7 * (max_w - idle_w) / peak_flops(dtype);
}

double DeviceSpec::joules_per_byte() const {
  if (e_byte_pj) return *e_byte_pj * 1e-12;
  return 0.3 * (max_w - idle_w) / (memory_bandwidth_gbs * 1e9);
}

HardwareTable HardwareTable::parse(const std::string& content, const std::string& origin) {
  toml::table root;
  try {
    root = toml::parse(content, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << "line " << e.source().begin.line << ": " << e.description();
    bad(origin, msg.str());
  }
  HardwareTable table;
  table.origin_ = origin;
  for (const auto& [k, v] : root) {
    const std::string key(k.str());
    const toml::table* t = v.as_table();
    if (key == "host") {
      if (!t) bad(origin, "[host] must be a table");
      table.host_.power_w = number(*t, "power_w", origin, "host");
      table.host_.rank_power_w = number(*t, "rank_power_w", origin, "host", false, table.host_.rank_power_w);
    } else if (key == "model") {
      if (!t) bad(origin, "[model] must be a table");
      ModelDefaults& m = table.model_;
      m.compute_efficiency = number(*t, "compute_efficiency", origin, "model", false, m.compute_efficiency);
      m.memory_efficiency = number(*t, "memory_efficiency", origin, "model", false, m.memory_efficiency);
      m.link_efficiency = number(*t, "link_efficiency", origin, "model", false, m.link_efficiency);
      m.dispatch_overhead_us = number(*t, "dispatch_overhead_us", origin, "model", false, m.dispatch_overhead_us);
      m.step_overhead_ms = number(*t, "step_overhead_ms", origin, "model", false, m.step_overhead_ms);
      m.comm_overlap = number(*t, "comm_overlap", origin, "model", false, m.comm_overlap);
      m.link_latency_us = number(*t, "link_latency_us", origin, "model", false, m.link_latency_us);
      m.busy_fraction = number(*t, "busy_fraction", origin, "model", false, m.busy_fraction);
      m.startup_s = number(*t, "startup_s", origin, "model", false, m.startup_s);
      m.fixed_power_fraction = number(*t, "fixed_power_fraction", origin, "model", false, m.fixed_power_fraction);
      m.idle_scale = number(*t, "idle_scale", origin, "model", false, m.idle_scale);
      m.dynamic_scale = number(*t, "dynamic_scale", origin, "model", false, m.dynamic_scale);
      m.interval_ln = number(*t, "interval_ln", origin, "model", false, m.interval_ln);
      if (m.compute_efficiency <= 0 || m.compute_efficiency > 1 || m.memory_efficiency <= 0 ||
          m.memory_efficiency > 1 || m.link_efficiency <= 0 || m.link_efficiency > 1 || m.comm_overlap > 1 ||
          m.startup_s < 0 || m.fixed_power_fraction < 0) {
        bad(origin,
            "[model] efficiencies must be in (0, 1], comm_overlap at most 1, startup_s and "
            "fixed_power_fraction non-negative");
      }
    } else if (t) {
      table.devices_.push_back(parse_device(key, *t, origin));
    }
  }
  if (table.devices_.empty()) bad(origin, "no devices");
  return table;
}

HardwareTable HardwareTable::load(const std::string& path) { return parse(read_file(path), path); }

HardwareTable HardwareTable::load_default(const std::string& explicit_path) {
  if (!explicit_path.empty()) return load(explicit_path);
  const std::string user = user_table_path();
  if (fs::exists(user)) return load(user);
  return load(shipped_table_path());
}

const DeviceSpec* HardwareTable::try_find(const std::string& name) const {
  auto match = [this](const std::string& want) -> const DeviceSpec* {
    for (const DeviceSpec& d : devices_) {
      if (normalise(d.key) == want || normalise(d.name) == want) return &d;
      for (const std::string& a : d.aliases) {
        if (normalise(a) == want) return &d;
      }
    }
    return nullptr;
  };
  std::string want = normalise(name);
  if (const DeviceSpec* d = match(want)) return d;
  // Drivers prefix names with vendor and brand words the table need not repeat.
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (const char* prefix : {"nvidia", "tesla", "geforce", "amd", "instinct"}) {
      const std::string p(prefix);
      if (want.size() > p.size() && want.compare(0, p.size(), p) == 0) {
        want.erase(0, p.size());
        stripped = true;
        if (const DeviceSpec* d = match(want)) return d;
      }
    }
  }
  return nullptr;
}

const DeviceSpec& HardwareTable::find(const std::string& name) const {
  if (const DeviceSpec* d = try_find(name)) return *d;
  std::string known;
  for (const std::string& k : keys()) known += (known.empty() ? "" : ", ") + k;
  throw std::invalid_argument("[energy] unknown GPU '" + name + "'; known: " + known);
}

std::vector<std::string> HardwareTable::keys() const {
  std::vector<std::string> out;
  for (const DeviceSpec& d : devices_) out.push_back(d.key);
  return out;
}

std::string shipped_table_path() {
  std::vector<fs::path> candidates;
#ifdef MEGANEURA_HARDWARE_TABLE
  candidates.emplace_back(MEGANEURA_HARDWARE_TABLE);
#endif
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / ".." / "share" / "meganeura" / "hardware.toml");
    candidates.push_back(exe.parent_path() / "hardware.toml");
  }
  for (const fs::path& p : candidates) {
    if (fs::exists(p)) return p.lexically_normal().string();
  }
  std::string tried;
  for (const fs::path& p : candidates) tried += (tried.empty() ? "" : ", ") + p.string();
  throw std::runtime_error("[energy] hardware table not found (tried " + tried + ")");
}

std::string user_table_path() {
  fs::path base;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) {
    base = x;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    base = fs::path(h) / ".local" / "share";
  } else {
    base = fs::temp_directory_path();
  }
  return (base / "meganeura" / "hardware.toml").string();
}

std::string ensure_user_table() {
  const fs::path user = user_table_path();
  if (fs::exists(user)) return user.string();
  fs::create_directories(user.parent_path());
  fs::copy_file(shipped_table_path(), user);
  return user.string();
}

namespace {

toml::table parse_for_update(const std::string& path) {
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    bad(path, std::string(e.description()));
  }
}

// Writes beside and renames so that a crash never leaves a half-written table.
void save_table(const std::string& path, const toml::table& root) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) bad(path, "cannot write");
    out << "# Written by meganeura energy calibration; comments of the shipped table are not kept.\n" << root << "\n";
    if (!out) bad(path, "write failed");
  }
  fs::rename(tmp, path);
}

}  // namespace

void write_device_coefficients(const std::string& path, const std::string& device_key, double e_flop_pj,
                               double e_byte_pj, const std::string& source) {
  toml::table root = parse_for_update(path);
  toml::table* dev = root.get_as<toml::table>(device_key);
  if (!dev) bad(path, "no device '" + device_key + "' to calibrate");
  dev->insert_or_assign("e_flop_pj", e_flop_pj);
  dev->insert_or_assign("e_byte_pj", e_byte_pj);
  if (toml::table* src = dev->get_as<toml::table>("source")) {
    src->insert_or_assign("e_flop_pj", source);
    src->insert_or_assign("e_byte_pj", source);
  }
  save_table(path, root);
}

void write_model_params(const std::string& path, const ModelDefaults& model, double host_power_w, double rank_power_w,
                        const std::string& source) {
  toml::table root = parse_for_update(path);
  if (!root.get_as<toml::table>("model")) root.insert_or_assign("model", toml::table{});
  if (!root.get_as<toml::table>("host")) root.insert_or_assign("host", toml::table{});
  toml::table& m = *root.get_as<toml::table>("model");
  m.insert_or_assign("compute_efficiency", model.compute_efficiency);
  m.insert_or_assign("memory_efficiency", model.memory_efficiency);
  m.insert_or_assign("link_efficiency", model.link_efficiency);
  m.insert_or_assign("dispatch_overhead_us", model.dispatch_overhead_us);
  m.insert_or_assign("step_overhead_ms", model.step_overhead_ms);
  m.insert_or_assign("comm_overlap", model.comm_overlap);
  m.insert_or_assign("link_latency_us", model.link_latency_us);
  m.insert_or_assign("busy_fraction", model.busy_fraction);
  m.insert_or_assign("startup_s", model.startup_s);
  m.insert_or_assign("fixed_power_fraction", model.fixed_power_fraction);
  m.insert_or_assign("idle_scale", model.idle_scale);
  m.insert_or_assign("dynamic_scale", model.dynamic_scale);
  m.insert_or_assign("interval_ln", model.interval_ln);
  m.insert_or_assign("source", source);
  toml::table& h = *root.get_as<toml::table>("host");
  h.insert_or_assign("power_w", host_power_w);
  h.insert_or_assign("rank_power_w", rank_power_w);
  h.insert_or_assign("source", source);
  save_table(path, root);
}

}  // namespace meganeura::energy
