// The hardware table's completeness and plausibility checks, and the power-limit model: its DVFS
// arithmetic against numbers worked by hand, and its properties on the shipped devices.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "energy/hardware.h"
#include "energy/physical_model.h"
#include "test_support.h"

namespace meganeura::energy {
namespace {

using testing_support::table;

std::string shipped_text() {
  std::ifstream in(MEGANEURA_SOURCE_DIR "/data/hardware.toml");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += x + "\n";
  return s;
}

TEST(HardwareTableCompleteness, EveryShippedEntryIsCompleteAndPlausible) {
  EXPECT_GE(table().devices().size(), 40u);
  for (const DeviceSpec& d : table().devices()) {
    EXPECT_EQ(joined(entry_problems(d)), "") << d.key;
    // The default limit (the TDP) lies inside the range the driver accepts.
    EXPECT_LE(d.power_limit_min_w, d.max_w) << d.key;
    EXPECT_GE(d.power_limit_max_w, d.max_w) << d.key;
  }
  // The GPUs users train on that the table lacked.
  for (const char* gpu : {"NVIDIA A40", "NVIDIA RTX A6000", "Quadro RTX 6000", "Tesla P100-PCIE-16GB", "NVIDIA A30",
                          "NVIDIA L40", "AMD Instinct MI210", "Intel Data Center GPU Max 1550", "RTX 5090", "P40"}) {
    EXPECT_NE(table().try_find(gpu), nullptr) << gpu;
  }
}

TEST(HardwareTableCompleteness, FiguresMatchTheirParts) {
  // Worked by hand from the datasheets: A40 384-bit GDDR6 at 14.5 Gb/s = 696 GB/s; 10752 lanes x 2 x
  // 1740 MHz = 37.4 TFLOP/s.
  const DeviceSpec& a40 = table().find("a40");
  EXPECT_DOUBLE_EQ(a40.memory_bus_bits * a40.memory_data_rate_gbps / 8, 696.0);
  EXPECT_NEAR(a40.fp32_lanes * a40.fp32_ops_per_clock * a40.boost_clock_mhz * 1e-6, 37.417, 1e-3);
  EXPECT_DOUBLE_EQ(a40.peak_tflops.at("fp32"), 37.4);
  // MI300X: 304 CUs x 64 lanes, packed fp32 (4 operations per clock), 2100 MHz = 163.4 TFLOP/s.
  const DeviceSpec& mi = table().find("mi300x");
  EXPECT_NEAR(mi.fp32_lanes * mi.fp32_ops_per_clock * mi.boost_clock_mhz * 1e-6, 163.43, 0.01);
  // The A2's configurable 40-60 W is its power-limit range.
  EXPECT_DOUBLE_EQ(table().find("a2").power_limit_min_w, 40);
  EXPECT_DOUBLE_EQ(table().find("a2").power_limit_max_w, 60);
}

// Replaces the first `from` after `[key]` in the shipped table.
std::string broken(const std::string& key, const std::string& from, const std::string& to) {
  std::string text = shipped_text();
  const size_t at = text.find(from, text.find("\n[" + key + "]\n"));
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

std::string problems_of(const std::string& text, const std::string& key) {
  const auto path = std::filesystem::temp_directory_path() / ("mg_hw_broken_" + std::to_string(getpid()) + ".toml");
  std::ofstream(path) << text;
  std::string out;
  try {
    out = joined(entry_problems(HardwareTable::load(path.string()).find(key)));
  } catch (const std::runtime_error& e) {
    out = e.what();
  }
  std::filesystem::remove(path);
  return out;
}

TEST(HardwareTableCompleteness, ABrokenEntryIsRefusedNamingTheField) {
  EXPECT_EQ(problems_of(shipped_text(), "a40"), "");
  const auto names = [](const std::string& text, const std::string& what) {
    const std::string p = problems_of(text, "a40");
    EXPECT_NE(p.find(what), std::string::npos) << "expected '" << what << "' in: " << p;
  };
  // 6960 GB/s on a 384-bit bus at 14.5 Gb/s (a slipped digit).
  names(broken("a40", "memory_bandwidth_gbs = 696.0", "memory_bandwidth_gbs = 6960.0"),
        "a40: 'memory_bandwidth_gbs' 6960 exceeds bus width x data rate (696 GB/s)");
  names(broken("a40", "fp32 = 37.4", "fp32 = 74.8"), "a40: 'peak_tflops.fp32' 74.8 exceeds lanes x ops x boost clock");
  names(broken("a40", "fp32_lanes = 10752\n", ""), "a40: 'fp32_lanes' is missing");
  names(broken("a40", "boost_clock_mhz = 1740", "boost_clock_mhz = 1740000"),
        "'boost_clock_mhz' 1.74e+06 is implausible");
  names(broken("a40", "power_limit_min_w = \"", "power_limit_min_wx = \""),
        "a40 has no source for 'power_limit_min_w'");
  names(broken("a40", "power_limit_min_w = 100", "power_limit_min_w = 350"),
        "a40.power_limit_min_w must lie above idle_w");
  names(broken("a40", "power_limit_max_w = 300", "power_limit_max_w = 250"),
        "a40.power_limit_max_w must be at least max_w");
}

// A synthetic board worked by hand: idle 50 W, TDP 250 W, range 100-300 W, base 1000 and boost
// 1500 MHz, so the voltage floor ends at 0.6 x 1500 = 900 MHz and the base clock lies above it.
DeviceSpec hand_board() {
  DeviceSpec d;
  d.key = "hand";
  d.peak_tflops = {{"fp32", 10.0}, {"fp16", 80.0}};
  d.memory_bandwidth_gbs = 500;
  d.memory_gb = 40;
  d.idle_w = 50;
  d.max_w = 250;
  d.power_limit_min_w = 100;
  d.power_limit_max_w = 300;
  d.base_clock_mhz = 1000;
  d.boost_clock_mhz = 1500;
  d.link_gbs = d.pcie_gbs = 16;
  return d;
}

TEST(PowerLimit, ClockAndVoltageWorkedByHand) {
  const DeviceSpec d = hand_board();
  // 200 W: dynamic share (200 - 50) / 200 = 0.75 of 1000^3, so f = 750^(1/3) x 100 = 908.56 MHz, above
  // the 900 MHz floor: V scales with f, the energy per operation by 0.90856^2 = 0.82548.
  PowerLimitEffect e = power_limit_effect(d, 200);
  EXPECT_NEAR(e.clock_mhz, 908.560, 1e-3);
  EXPECT_NEAR(e.clock_ratio, 0.908560, 1e-6);
  EXPECT_NEAR(e.energy_ratio, 0.825482, 1e-6);
  EXPECT_NEAR(e.power_ratio, 0.75, 1e-12);
  // 150 W: share 0.5, 5e8 below the floor's 900^3 = 7.29e8, so the voltage stays at the floor:
  // f = 5e8 / 900^2 = 617.28 MHz and the energy per operation is (900/1000)^2 = 0.81.
  e = power_limit_effect(d, 150);
  EXPECT_NEAR(e.clock_mhz, 617.284, 1e-3);
  EXPECT_NEAR(e.energy_ratio, 0.81, 1e-12);
  EXPECT_NEAR(e.power_ratio, 0.5, 1e-12);
  // 300 W: share 1.25, f = 1250^(1/3) x 100 = 1077.22 MHz, under the boost clock.
  EXPECT_NEAR(power_limit_effect(d, 300).clock_mhz, 1077.217, 1e-3);
  // The default limit (TDP, or 0) changes nothing, exactly.
  for (double w : {0.0, 250.0}) {
    e = power_limit_effect(d, w);
    EXPECT_EQ(e.clock_ratio, 1.0);
    EXPECT_EQ(e.energy_ratio, 1.0);
    EXPECT_EQ(e.power_ratio, 1.0);
    EXPECT_EQ(e.limit_w, 250.0);
  }
}

TEST(PowerLimit, RefusesLimitsOutsideTheRange) {
  const DeviceSpec d = hand_board();
  const auto refuses = [&](double w, const std::string& why) {
    try {
      power_limit_effect(d, w);
      ADD_FAILURE() << w << " W accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refuses(99, "power limit 99 W lies outside hand's range [100, 300] W");
  refuses(301, "lies outside hand's range");
  refuses(-5, "power limit must be a positive number of watts");
  refuses(NAN, "power limit must be a positive number of watts");
  DeviceSpec none = d;
  none.power_limit_min_w = none.power_limit_max_w = 0;
  EXPECT_THROW(power_limit_effect(none, 200), std::invalid_argument);
  EXPECT_NO_THROW(power_limit_effect(none, 250));  // the default limit needs no range
}

TransformerConfig gpt(int layers, int hidden, double batch, double seq) {
  TransformerConfig c;
  c.layers = layers;
  c.hidden = hidden;
  c.batch = batch;
  c.seq = seq;
  c.tokens = 1e9;
  c.dtype = "fp16";
  return c;
}

PhysicalPrediction at(const DeviceSpec& d, const TransformerConfig& c, double limit_w) {
  ParallelConfig par;
  par.power_limit_w = limit_w;
  return predict_transformer(c, par, d, table().params());
}

double term(const std::vector<Term>& terms, const std::string& name) {
  for (const Term& t : terms) {
    if (t.name == name) return t.value;
  }
  ADD_FAILURE() << "no term " << name;
  return 0;
}

TEST(PowerLimit, TheDefaultLimitIsTodaysPredictionExactly) {
  for (const char* gpu : {"a100-40gb", "rtx-2080-ti", "t4", "v100-pcie", "h100-sxm", "mi300x"}) {
    const DeviceSpec& d = table().find(gpu);
    for (const TransformerConfig& c : {gpt(12, 768, 8, 128), gpt(2, 128, 32, 64)}) {
      const PhysicalPrediction today = at(d, c, 0), tdp = at(d, c, d.max_w);
      EXPECT_EQ(tdp.time_s, today.time_s) << gpu;
      EXPECT_EQ(tdp.total_energy_j, today.total_energy_j) << gpu;
      EXPECT_EQ(tdp.layers.back().energy_j, today.layers.back().energy_j) << gpu;
    }
  }
}

TEST(PowerLimit, ComputeTimeScalesWithTheClockAndEnergyPerOperationWithVoltage) {
  DeviceSpec d = hand_board();
  const TransformerConfig c = gpt(24, 2048, 4, 512);
  const PhysicalPrediction full = at(d, c, 0), half = at(d, c, 150);
  // Worked above: 617.284 MHz against 1000, and 0.81 of the energy per operation.
  EXPECT_NEAR(term(half.time_terms, "compute") / term(full.time_terms, "compute"), 1000 / 617.284, 1e-5);
  EXPECT_EQ(term(half.time_terms, "memory"), term(full.time_terms, "memory"));
  EXPECT_EQ(term(half.time_terms, "launch"), term(full.time_terms, "launch"));
  // Only the per-operation part of the dynamic energy falls (by 0.81); the per-byte part stays.
  EXPECT_LT(term(half.energy_terms, "dynamic"), term(full.energy_terms, "dynamic"));
  EXPECT_GT(term(half.energy_terms, "dynamic"), 0.81 * term(full.energy_terms, "dynamic"));
  EXPECT_EQ(half.power_limit.limit_w, 150);
  EXPECT_LT(half.average_power_w, full.average_power_w);
}

TEST(PowerLimit, TimeFallsAndPowerRisesWithTheLimit) {
  for (const char* gpu : {"a100-40gb", "a40", "rtx-4090", "t4", "mi210"}) {
    const DeviceSpec& d = table().find(gpu);
    const TransformerConfig c = gpt(12, 768, 16, 512);
    PhysicalPrediction prev = at(d, c, d.power_limit_min_w);
    for (double w = d.power_limit_min_w + 5; w <= d.power_limit_max_w; w += 5) {
      const PhysicalPrediction p = at(d, c, w);
      EXPECT_LE(p.time_s, prev.time_s) << gpu << " " << w;
      EXPECT_GE(p.average_power_w, prev.average_power_w * (1 - 1e-12)) << gpu << " " << w;
      prev = p;
    }
  }
}

TEST(PowerLimit, MemoryBoundWorkBarelySlows) {
  // A board whose memory is so slow that every step is memory-bound.
  DeviceSpec d = hand_board();
  d.memory_bandwidth_gbs = 1;
  const TransformerConfig c = gpt(4, 256, 8, 128);
  const PhysicalPrediction full = at(d, c, 0), low = at(d, c, 100);
  ASSERT_EQ(full.bound, "memory");
  EXPECT_LT(low.time_s / full.time_s, 1.01);
  // The same run compute-bound (fast memory) slows by far more.
  d.memory_bandwidth_gbs = 50000;
  const TransformerConfig big = gpt(24, 2048, 4, 512);
  ASSERT_EQ(at(d, big, 0).bound, "compute");
  EXPECT_GT(at(d, big, 100).time_s / at(d, big, 0).time_s, 1.5);
}

TEST(PowerLimit, ComputeBoundEnergyIsLeastBelowTheTdp) {
  for (const char* gpu : {"a100-40gb", "a100-80gb", "v100-sxm2", "a40", "rtx-a6000"}) {
    const DeviceSpec& d = table().find(gpu);
    const TransformerConfig c = gpt(24, 2048, 4, 512);
    ASSERT_EQ(at(d, c, 0).bound, "compute") << gpu;
    double best_w = d.max_w, best_j = at(d, c, d.max_w).total_energy_j;
    for (double w = d.power_limit_min_w; w < d.max_w; w += 1) {
      const double j = at(d, c, w).total_energy_j;
      if (j < best_j) best_w = w, best_j = j;
    }
    EXPECT_LT(best_w, d.max_w) << gpu;
    EXPECT_LT(best_j, at(d, c, d.max_w).total_energy_j) << gpu;
  }
}

// A board whose sustained (base) clock already lies on the voltage floor (the L40 holds 735 MHz
// at its TDP, below 0.6 x 2490 MHz) runs slower at a lower limit for the same energy per
// operation: its energy only grows.
TEST(PowerLimit, ABoardOnItsVoltageFloorSavesNothing) {
  const DeviceSpec& d = table().find("l40");
  ASSERT_LT(d.base_clock_mhz, kVoltageFloorShare * d.boost_clock_mhz);
  const PowerLimitEffect e = power_limit_effect(d, 200);
  EXPECT_DOUBLE_EQ(e.energy_ratio, 1.0);
  EXPECT_NEAR(e.clock_ratio, (200 - d.idle_w) / (d.max_w - d.idle_w), 1e-12);  // power linear in f
  const TransformerConfig c = gpt(24, 2048, 4, 512);
  EXPECT_GT(at(d, c, 200).total_energy_j, at(d, c, d.max_w).total_energy_j);
}

}  // namespace
}  // namespace meganeura::energy
