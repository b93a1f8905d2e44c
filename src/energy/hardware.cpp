#include "energy/hardware.h"

#include <fmt/format.h>
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
#include <tuple>

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

// The clock range (both clocks or neither) and the tensor-core flag, checked against the peaks.
void parse_clocks(DeviceSpec& d, const toml::table& t, const std::string& origin) {
  if (t.get("base_clock_mhz") || t.get("boost_clock_mhz")) {
    d.base_clock_mhz = number(t, "base_clock_mhz", origin, d.key);
    d.boost_clock_mhz = number(t, "boost_clock_mhz", origin, d.key);
    if (!(d.base_clock_mhz > 0) || d.base_clock_mhz > d.boost_clock_mhz) {
      bad(origin, d.key + ".base_clock_mhz must be positive and at most boost_clock_mhz");
    }
  }
  if (const toml::node* n = t.get("tensor_cores")) {
    if (!n->is_boolean()) bad(origin, d.key + ".tensor_cores must be true or false");
    d.tensor_cores = n->value_or(true);
  }
  if (d.tensor_cores) {
    const double fp32 = d.peak_tflops.count("fp32") ? d.peak_tflops.at("fp32") : 0;
    double half = 0;
    for (const char* dt : {"fp16", "bf16"}) half = std::max(half, d.peak_tflops.count(dt) ? d.peak_tflops.at(dt) : 0.0);
    if (!(half > fp32)) bad(origin, d.key + " lists tensor cores but no fp16/bf16 matrix rate above its fp32 rate");
  }
}

// The power-limit range (both ends or neither), which must contain the default limit (max_w),
// and the optional figures the plausibility checks use.
void parse_limits(DeviceSpec& d, const toml::table& t, const std::string& origin) {
  if (t.get("power_limit_min_w") || t.get("power_limit_max_w")) {
    d.power_limit_min_w = number(t, "power_limit_min_w", origin, d.key);
    d.power_limit_max_w = number(t, "power_limit_max_w", origin, d.key);
    if (!(d.power_limit_min_w > d.idle_w) || d.power_limit_min_w > d.max_w) {
      bad(origin, d.key + ".power_limit_min_w must lie above idle_w and at most max_w (the default limit)");
    }
    if (d.power_limit_max_w < d.max_w) bad(origin, d.key + ".power_limit_max_w must be at least max_w");
  }
  d.memory_bus_bits = number(t, "memory_bus_bits", origin, d.key, false);
  d.memory_data_rate_gbps = number(t, "memory_data_rate_gbps", origin, d.key, false);
  d.fp32_lanes = number(t, "fp32_lanes", origin, d.key, false);
  d.fp32_ops_per_clock = number(t, "fp32_ops_per_clock", origin, d.key, false);
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
  parse_clocks(d, t, origin);
  parse_limits(d, t, origin);
  if (const toml::table* src = t.get_as<toml::table>("source")) {
    for (const auto& [field, v] : *src) d.sources[std::string(field.str())] = v.value_or(std::string());
  }
  // A number without a citation is a number nobody can check.
  std::vector<std::string> cited = {"peak_tflops", "memory_bandwidth_gbs", "max_w", "idle_w", "link_gbs"};
  if (d.base_clock_mhz > 0) cited.insert(cited.end(), {"base_clock_mhz", "boost_clock_mhz"});
  if (d.power_limit_max_w > 0) cited.insert(cited.end(), {"power_limit_min_w", "power_limit_max_w"});
  for (const std::string& field : cited) {
    if (!d.sources.count(field)) bad(origin, key + " has no source for '" + field + "'");
  }
  return d;
}

double knob_value(const toml::table& t, const ParamKnob& k, double current, const std::string& origin) {
  const toml::node* n = t.get(k.key);
  if (!n) return current;
  const std::optional<double> v = n->value<double>();
  if (!v || !std::isfinite(*v) || (!k.signed_value && *v < 0)) {
    bad(origin, std::string(k.section) + "." + k.key + " must be a number" + (k.signed_value ? "" : " >= 0"));
  }
  return *v * k.unit;
}

// The [model] and [host] sections: every knob is optional, an absent one keeps its default.
void parse_params(PhysicalParams& p, const toml::table& root, const std::string& origin) {
  for (const std::string section : {"model", "host"}) {
    const toml::node* n = root.get(section);
    if (!n) continue;
    if (!n->as_table()) bad(origin, "[" + section + "] must be a table");
    for (const ParamKnob& k : param_knobs()) {
      if (section == k.section) p.*k.member = knob_value(*n->as_table(), k, p.*k.member, origin);
    }
  }
  const auto fraction = [](double x) { return x > 0 && x <= 1; };
  if (!fraction(p.compute_efficiency) || !fraction(p.memory_efficiency) || !fraction(p.link_efficiency) ||
      p.comm_overlap > 1) {
    bad(origin, "[model] efficiencies must be in (0, 1] and comm_overlap at most 1");
  }
}

std::vector<std::string> text_list(const toml::table& t, const char* key) {
  std::vector<std::string> out;
  if (const toml::array* a = t.get_as<toml::array>(key)) {
    for (const toml::node& n : *a) out.push_back(n.value_or(std::string()));
  }
  return out;
}

// A [low, high] pair of numbers; {0, 0} when absent.
std::pair<double, double> number_pair(const toml::table& t, const char* key, const std::string& origin) {
  const toml::array* a = t.get_as<toml::array>(key);
  if (!a) return {0, 0};
  const std::optional<double> lo = a->size() == 2 ? (*a)[0].value<double>() : std::nullopt;
  const std::optional<double> hi = a->size() == 2 ? (*a)[1].value<double>() : std::nullopt;
  if (!lo || !hi || !(*lo >= 0) || !(*hi >= *lo)) bad(origin, std::string("fitted.") + key + " must be [low, high]");
  return {*lo, *hi};
}

FittedRange parse_fitted(const toml::table& t, const std::string& origin) {
  FittedRange r;
  r.gpus = text_list(t, "gpus");
  r.strategies = text_list(t, "strategies");
  std::tie(r.min_parameters, r.max_parameters) = number_pair(t, "parameters", origin);
  std::tie(r.min_tokens_per_step, r.max_tokens_per_step) = number_pair(t, "tokens_per_step", origin);
  const auto [g0, g1] = number_pair(t, "gpu_count", origin);
  r.min_gpus = int(g0), r.max_gpus = int(g1);
  r.source = text(t, "source");
  return r;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("[energy] cannot read hardware table " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<std::string> entry_problems(const DeviceSpec& d) {
  std::vector<std::string> out;
  const auto need = [&](const char* field, double v) {
    if (!(v > 0)) out.push_back(d.key + ": '" + field + "' is missing or not positive");
  };
  need("memory_gb", d.memory_gb);
  need("base_clock_mhz", d.base_clock_mhz);
  need("boost_clock_mhz", d.boost_clock_mhz);
  need("power_limit_min_w", d.power_limit_min_w);
  need("power_limit_max_w", d.power_limit_max_w);
  need("memory_bus_bits", d.memory_bus_bits);
  need("memory_data_rate_gbps", d.memory_data_rate_gbps);
  need("fp32_lanes", d.fp32_lanes);
  need("fp32_ops_per_clock", d.fp32_ops_per_clock);
  need("pcie_gbs", d.pcie_gbs);
  if (d.arch.empty()) out.push_back(d.key + ": 'arch' is missing");
  if (d.link.empty()) out.push_back(d.key + ": 'link' is missing");
  if (!d.peak_tflops.count("fp32")) out.push_back(d.key + ": 'peak_tflops.fp32' is missing");
  for (const char* field : {"peak_tflops", "memory_bandwidth_gbs", "memory_gb", "idle_w", "max_w", "base_clock_mhz",
                            "boost_clock_mhz", "power_limit_min_w", "power_limit_max_w", "link_gbs", "pcie_gbs",
                            "memory_bus_bits", "memory_data_rate_gbps", "fp32_lanes", "fp32_ops_per_clock"}) {
    const auto it = d.sources.find(field);
    if (it == d.sources.end() || it->second.size() < 8) out.push_back(d.key + ": no source for '" + field + "'");
  }
  // Datasheet figures are rounded: 2% of slack above the product of the parts.
  const double slack = 1.02;
  const double bus_gbs = d.memory_bus_bits * d.memory_data_rate_gbps / 8;
  if (bus_gbs > 0 && d.memory_bandwidth_gbs > bus_gbs * slack) {
    out.push_back(fmt::format("{}: 'memory_bandwidth_gbs' {:g} exceeds bus width x data rate ({:g} GB/s)", d.key,
                              d.memory_bandwidth_gbs, bus_gbs));
  }
  const double fp32_tflops = d.fp32_lanes * d.fp32_ops_per_clock * d.boost_clock_mhz * 1e-6;
  if (fp32_tflops > 0 && d.peak_tflops.count("fp32") && d.peak_tflops.at("fp32") > fp32_tflops * slack) {
    out.push_back(fmt::format("{}: 'peak_tflops.fp32' {:g} exceeds lanes x ops x boost clock ({:g} TFLOP/s)", d.key,
                              d.peak_tflops.at("fp32"), fp32_tflops));
  }
  // Wide bounds that a unit slip (MHz for GHz, W for kW, MB for GB) falls outside.
  const auto within = [&](const char* field, double v, double lo, double hi) {
    if (v > 0 && (v < lo || v > hi)) out.push_back(fmt::format("{}: '{}' {:g} is implausible", d.key, field, v));
  };
  within("boost_clock_mhz", d.boost_clock_mhz, 500, 3500);
  within("max_w", d.max_w, 25, 1500);
  within("idle_w", d.idle_w, 2, 200);
  within("memory_gb", d.memory_gb, 2, 512);
  within("memory_bandwidth_gbs", d.memory_bandwidth_gbs, 100, 10000);
  within("memory_data_rate_gbps", d.memory_data_rate_gbps, 0.5, 40);
  return out;
}

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

double DeviceSpec::sustained_clock_ratio() const {
  return base_clock_mhz > 0 && boost_clock_mhz > 0 ? base_clock_mhz / boost_clock_mhz : 1.0;
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
  parse_params(table.params_, root, origin);
  if (const toml::node* n = root.get("fitted")) {
    if (!n->as_table()) bad(origin, "[fitted] must be a table");
    table.fitted_ = parse_fitted(*n->as_table(), origin);
  }
  for (const auto& [k, v] : root) {
    const std::string key(k.str());
    if (key == "host" || key == "model" || key == "fitted") continue;
    if (const toml::table* t = v.as_table()) table.devices_.push_back(parse_device(key, *t, origin));
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

void write_model_params(const std::string& path, const PhysicalParams& params, const FittedRange& range,
                        const std::string& source) {
  toml::table root = parse_for_update(path);
  for (const char* section : {"model", "host", "fitted"}) {
    if (!root.get_as<toml::table>(section)) root.insert_or_assign(section, toml::table{});
  }
  for (const ParamKnob& k : param_knobs()) {
    root.get_as<toml::table>(k.section)->insert_or_assign(k.key, params.*k.member / k.unit);
  }
  root.get_as<toml::table>("model")->insert_or_assign("source", source);
  root.get_as<toml::table>("host")->insert_or_assign("source", source);
  toml::table& f = *root.get_as<toml::table>("fitted");
  const auto list = [](const std::vector<std::string>& v) {
    toml::array a;
    for (const std::string& s : v) a.push_back(s);
    return a;
  };
  f.insert_or_assign("gpus", list(range.gpus));
  f.insert_or_assign("parameters", toml::array{range.min_parameters, range.max_parameters});
  f.insert_or_assign("tokens_per_step", toml::array{range.min_tokens_per_step, range.max_tokens_per_step});
  f.insert_or_assign("gpu_count", toml::array{double(range.min_gpus), double(range.max_gpus)});
  f.insert_or_assign("strategies", list(range.strategies));
  f.insert_or_assign("source", source);
  save_table(path, root);
}

}  // namespace meganeura::energy
