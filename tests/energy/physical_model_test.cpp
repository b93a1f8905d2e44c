#include "energy/physical_model.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "test_support.h"

namespace meganeura::energy {
namespace {

using testing_support::table;

TEST(HardwareTable, ListsEveryRequiredDeviceWithSources) {
  for (const char* key : {"v100-sxm2", "v100-pcie", "t4", "rtx-2080-ti", "a100-40gb", "a100-80gb", "h100-sxm", "h200",
                          "rtx-4090", "mi300x"}) {
    const DeviceSpec& d = table().find(key);
    for (const char* field : {"peak_tflops", "memory_bandwidth_gbs", "max_w", "idle_w", "link_gbs"}) {
      EXPECT_FALSE(d.sources.at(field).empty()) << key << " " << field;
    }
  }
  EXPECT_DOUBLE_EQ(table().find("h100-sxm").peak_flops("bf16"), 989.4e12);
  EXPECT_DOUBLE_EQ(table().find("H200").memory_bandwidth_gbs, 4800);
  EXPECT_DOUBLE_EQ(table().find("NVIDIA A100-SXM4-80GB").max_w, 400);
  EXPECT_EQ(table().find("RTX 2080 Ti").key, "rtx-2080-ti");
  EXPECT_EQ(table().find("NVIDIA GeForce RTX 2080 Ti").key, "rtx-2080-ti");
  EXPECT_EQ(table().find("Tesla V100-PCIE-32GB").key, "v100-pcie");
  EXPECT_EQ(table().find("NVIDIA H200 141GB HBM3e").key, "h200");
  EXPECT_EQ(table().find("AMD Instinct MI300X").key, "mi300x");
  EXPECT_EQ(table().try_find("nvidia"), nullptr);
}

TEST(HardwareTable, UnknownGpuListsKnownOnes) {
  try {
    table().find("gtx 480");
    FAIL() << "unknown GPU accepted";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown GPU 'gtx 480'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("h100-sxm"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mi300x"), std::string::npos) << msg;
  }
  EXPECT_THROW(table().find("t4").peak_flops("fp8"), std::invalid_argument);
}

TEST(HardwareTable, RejectsNumbersWithoutSource) {
  const std::string text = R"(
[x]
name = "X"
peak_tflops = { fp32 = 1.0 }
memory_bandwidth_gbs = 10.0
idle_w = 1.0
max_w = 2.0
link_gbs = 1.0
[x.source]
peak_tflops = "a"
)";
  EXPECT_THROW(HardwareTable::parse(text, "t.toml"), std::runtime_error);
  EXPECT_THROW(HardwareTable::parse("[x\n", "t.toml"), std::runtime_error);
}

TEST(HardwareTable, UserCopyTakesCalibratedCoefficients) {
  const auto dir = std::filesystem::temp_directory_path() / ("mg_hw_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  setenv("XDG_DATA_HOME", dir.c_str(), 1);
  const std::string path = ensure_user_table();
  EXPECT_EQ(path, (dir / "meganeura" / "hardware.toml").string());
  write_device_coefficients(path, "h100-sxm", 1.5, 20.0, "test calibration");
  const HardwareTable t = HardwareTable::load_default();
  EXPECT_EQ(t.origin(), path);
  EXPECT_DOUBLE_EQ(t.find("h100-sxm").joules_per_flop("bf16"), 1.5e-12);
  EXPECT_DOUBLE_EQ(t.find("h100-sxm").joules_per_byte(), 20e-12);
  EXPECT_EQ(t.find("h100-sxm").sources.at("e_flop_pj"), "test calibration");
  EXPECT_FALSE(t.find("a100-40gb").e_flop_pj.has_value());
  unsetenv("XDG_DATA_HOME");
  std::filesystem::remove_all(dir);
}

// One compute-bound and one launch-bound dispatch on an H100, priced by hand.
TEST(PhysicalModel, PricesDispatchesByRoofline) {
  PhysicalParams p;
  p.compute_efficiency = 0.5;
  p.memory_efficiency = 1.0;
  p.dispatch_overhead_s = 10e-6;
  p.host_power_w = 100;
  p.rank_power_w = 0;
  p.busy_fraction = 0;
  p.dynamic_scale = 1;
  p.fixed_power_fraction = 0.5;
  const std::vector<WorkItem> work = {{"big", "matmul", 989.4e12, 3.35e9, 0}, {"tiny", "elementwise", 0, 1e3, 1}};
  const DeviceSpec& h100 = table().find("h100-sxm");
  const PhysicalPrediction r = predict_work(work, h100, p, "bf16", 2);
  ASSERT_EQ(r.dispatches.size(), 2u);
  // 989.4 TFLOP at half of 989.4 TFLOP/s held at the base clock (1590 of 1980 MHz), 3.35 GB at
  // 3.35 TB/s, plus the launch.
  const double clock = 1590.0 / 1980.0;
  const double t_big = 2.0 / clock + 1e-3 + 10e-6, t_tiny = 1e3 / 3.35e12 + 10e-6;
  EXPECT_NEAR(r.dispatches[0].time_s, t_big, 1e-12);
  EXPECT_EQ(r.dispatches[0].bound, "compute");
  EXPECT_NEAR(r.dispatches[1].time_s, t_tiny, 1e-15);
  EXPECT_EQ(r.dispatches[1].bound, "launch");
  // Idle 70 W throughout, half the 630 W range during the launch only (busy_fraction 0),
  // 0.7 * 630 W / peak per FLOP and 0.3 * 630 W / bandwidth per byte (dynamic_scale 1).
  const double e_big = 70 * t_big + 0.5 * 630 * 10e-6 + 0.7 * 630 * 1.0 + 0.3 * 630 * 1e-3;
  const double e_tiny = 70 * t_tiny + 0.5 * 630 * 10e-6 + 0.3 * 630 * 1e3 / 3.35e12;
  EXPECT_NEAR(r.dispatches[0].energy_j, e_big, 1e-9);
  EXPECT_NEAR(r.dispatches[1].energy_j, e_tiny, 1e-12);
  EXPECT_NEAR(r.step_time_s, t_big + t_tiny, 1e-12);
  // Two steps, no start-up for a program, the host at 100 W throughout.
  EXPECT_NEAR(r.total_energy_j, 2 * (e_big + e_tiny) + 100 * 2 * (t_big + t_tiny), 1e-8);
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_NEAR(r.layers[0].time_s, 2 * t_big, 1e-12);
}

// A launch-bound program (many tiny dispatches) runs near idle power: its average device
// power must sit close to idle, far below the board maximum.
TEST(PhysicalModel, LaunchBoundProgramsRunNearIdlePower) {
  const PhysicalParams p = table().params();
  std::vector<WorkItem> work(852, WorkItem{"tiny", "elementwise", 1e4, 1e5, -1});
  const DeviceSpec& h100 = table().find("h100-sxm");
  const PhysicalPrediction r = predict_work(work, h100, p, "bf16", 1, 4096);
  const double device_w = r.device_energy_j / r.time_s;
  // Idle 70 W plus the fixed-time share (0.2 of 630 W): 196 W, plus a few watts for the 30 ns
  // of memory traffic per dispatch, against a 700 W maximum.
  EXPECT_LT(device_w, h100.idle_w + p.fixed_power_fraction * (h100.max_w - h100.idle_w) + 5);
  EXPECT_LT(device_w, 0.3 * h100.max_w);
  EXPECT_GT(device_w, h100.idle_w);
  EXPECT_NEAR(r.joules_per_token, r.total_energy_j / 4096, 1e-12);
}

// With the shipped power shares (busy_fraction 0.3, dynamic_scale 0.7, launch time at 0.2 of
// the range) on an H100 (idle 70 W, max 700 W, 989.4 TFLOP/s bf16 at 1980 MHz held at its
// 1590 MHz base clock, 3350 GB/s): a one-second memory-bound dispatch at efficiency e_m draws
// idle + (0.3 + 0.7 * 0.3 * e_m) of the 630 W range, a one-second compute-bound one at e_c
// idle + (0.3 + 0.7 * 0.7 * clock * e_c), and no busy second is priced above the board's
// rating. Expected values by hand from those numbers.
TEST(PhysicalModel, BusyPowerStaysWithinTheBoardRange) {
  const PhysicalParams p = table().params();
  ASSERT_DOUBLE_EQ(p.busy_fraction + p.dynamic_scale, 1.0);
  ASSERT_DOUBLE_EQ(p.busy_fraction, 0.3);
  ASSERT_DOUBLE_EQ(p.fixed_power_fraction, 0.2);
  const DeviceSpec& h100 = table().find("h100-sxm");
  const double clock = 1590.0 / 1980.0, launch = p.dispatch_overhead_s;
  const double launch_j = 70 * launch + 0.2 * 630 * launch;
  const WorkItem memory{"copy", "elementwise", 0, 3350e9 * p.memory_efficiency, 0};
  const PhysicalPrediction m = predict_work({memory}, h100, p, "bf16");
  EXPECT_NEAR(m.time_s, 1 + launch, 1e-12);
  EXPECT_NEAR(m.device_energy_j, 70 + (0.3 + 0.7 * 0.3 * p.memory_efficiency) * 630 + launch_j, 1e-9);
  EXPECT_EQ(m.dispatches[0].bound, "memory");
  const WorkItem compute{"gemm", "matmul", 989.4e12 * clock * p.compute_efficiency, 0, 0};
  const PhysicalPrediction c = predict_work({compute}, h100, p, "bf16");
  EXPECT_NEAR(c.time_s, 1 + launch, 1e-12);
  EXPECT_NEAR(c.device_energy_j, 70 + (0.3 + 0.7 * 0.7 * clock * p.compute_efficiency) * 630 + launch_j, 1e-9);
  // The most a dispatch can draw: compute at full efficiency, idle + (0.3 + 0.7 * 0.7 * clock)
  // of the range = 475 W, under the 700 W rating (the roofline adds compute and memory time,
  // so FLOPs and bytes never both run at their roofs at once).
  PhysicalParams full = p;
  full.compute_efficiency = 1;
  full.dispatch_overhead_s = 0;
  const WorkItem peak{"gemm", "matmul", 989.4e12 * clock, 0, 0};
  const PhysicalPrediction f = predict_work({peak}, h100, full, "bf16");
  EXPECT_NEAR(f.time_s, 1.0, 1e-12);
  EXPECT_NEAR(f.device_energy_j, 70 + (0.3 + 0.7 * 0.7 * clock) * 630, 1e-9);
  EXPECT_LT(f.device_energy_j, h100.max_w);
}

// Tensor parallelism splits the weights, and with them their optimizer state, N ways once:
// the Adam update of one layer over 2 GPUs touches (4 d^2 + 2 d f) / 2 + (9 d + f) parameters.
TEST(PhysicalModel, TensorParallelOptimizerStateSplitOnce) {
  const DeviceSpec& gpu = table().find("a100-80gb");
  TransformerConfig c;
  c.layers = 10;
  c.hidden = 640;
  c.heads = 8;
  c.batch = 32;
  c.seq = 66;
  c.tokens = 8.2e6;
  c.ff = 2560;
  c.vocab = 0;
  c.grad_accum = 1;
  const RunFeatures one = transformer_features(c, {1, Strategy::kBaseline}, gpu);
  const RunFeatures tp2 = transformer_features(c, {2, Strategy::kTensorParallel}, gpu);
  const double d = 640, f = 2560;
  const double per_layer_1 = 4 * d * d + 2 * d * f + 9 * d + f;
  const double per_layer_2 = (4 * d * d + 2 * d * f) / 2 + 9 * d + f;
  // Adam: 12 FLOPs per parameter; the rest of the step is identical work split by 2 (matmuls,
  // attention) or not split (norms, residuals); compare the optimizer difference alone.
  std::vector<WorkItem> w1 = transformer_step_work(
      [&] {
        auto x = c;
        x.layers = 1;
        return x;
      }(),
      1, 1);
  std::vector<WorkItem> w2 = transformer_step_work(
      [&] {
        auto x = c;
        x.layers = 1;
        return x;
      }(),
      2, 1);
  double adam1 = 0, adam2 = 0;
  for (const auto& w : w1) adam1 += w.kind == "optimizer" ? w.flops : 0;
  for (const auto& w : w2) adam2 += w.kind == "optimizer" ? w.flops : 0;
  EXPECT_DOUBLE_EQ(adam1, 12 * per_layer_1);
  EXPECT_DOUBLE_EQ(adam2, 12 * per_layer_2);
  // The run features must price exactly that: the FLOP difference per step between TP 2 and
  // one device is the matmul/attention halving plus the optimizer halving, never a quarter.
  double other1 = 0, other2 = 0;
  for (const auto& w : w1) other1 += w.kind != "optimizer" ? w.flops : 0;
  for (const auto& w : w2) other2 += w.kind != "optimizer" ? w.flops : 0;
  EXPECT_NEAR(one.flops, 10 * (other1 + adam1), 1e-9 * one.flops);
  EXPECT_NEAR(tp2.flops, 10 * (other2 + adam2), 1e-9 * tp2.flops);
}

TransformerConfig bert_10x640() {
  TransformerConfig c;
  c.layers = 10;
  c.hidden = 640;
  c.heads = 8;
  c.vocab = 30522;
  c.batch = 32;
  c.seq = 66;
  c.tokens = 8.2e6;
  return c;
}

TEST(PhysicalModel, ParallelismCostsCommunication) {
  const PhysicalParams p = table().params();
  const DeviceSpec& gpu = table().find("rtx-2080-ti");
  const TransformerConfig c = bert_10x640();
  const PhysicalPrediction single = predict_transformer(c, {1, Strategy::kBaseline}, gpu, p);
  EXPECT_DOUBLE_EQ(single.efficiency, 1.0);
  EXPECT_DOUBLE_EQ(single.comm_time_s, 0.0);
  // Ten layers, the embedding/optimizer tail, and per-step overhead (no communication here).
  ASSERT_EQ(single.layers.size(), 12u);
  EXPECT_EQ(single.layers[0].name, "layer0");
  EXPECT_EQ(single.layers[10].name, "other");
  EXPECT_GT(single.layers.back().energy_j, 0);
  // The last entry: start-up, per-step fixed cost, the optimizer's host cost for each of the
  // 16 x 10 + 4 + 2 parameter tensors every step (grad_accum 1), and the latency of no collective.
  EXPECT_NEAR(single.layers.back().time_s,
              p.startup_s + single.steps * (p.step_overhead_s + 166 * p.optimizer_tensor_s), 1e-6);
  double terms_s = 0, terms_j = 0;
  for (const Term& t : single.time_terms) terms_s += t.value;
  for (const Term& t : single.energy_terms) terms_j += t.value;
  EXPECT_NEAR(terms_s, single.time_s, 1e-9 * single.time_s);
  EXPECT_NEAR(terms_j, single.total_energy_j, 1e-9 * single.total_energy_j);
  const PhysicalPrediction dp = predict_transformer(c, {2, Strategy::kDataParallel}, gpu, p);
  const PhysicalPrediction tp = predict_transformer(c, {2, Strategy::kTensorParallel}, gpu, p);
  const PhysicalPrediction tp4 = predict_transformer(c, {4, Strategy::kTensorParallel}, gpu, p);
  EXPECT_GT(dp.comm_time_s, 0);
  EXPECT_LT(dp.efficiency, 1.0);
  EXPECT_LT(tp.efficiency, dp.efficiency);  // activations every layer vs gradients once
  EXPECT_LT(tp4.efficiency, tp.efficiency);
  EXPECT_GT(tp4.kwh, single.kwh);
  // Half the steps per device under data parallelism, same tokens overall.
  EXPECT_NEAR(dp.steps, single.steps / 2, 1e-9);
  const PhysicalPrediction nvlink =
      predict_transformer(c, {2, Strategy::kTensorParallel}, table().find("a100-80gb"), p);
  ParallelConfig pcie{2, Strategy::kTensorParallel, true};
  EXPECT_GT(predict_transformer(c, pcie, table().find("a100-80gb"), p).comm_time_s, nvlink.comm_time_s);
  EXPECT_NEAR(single.joules_per_token, single.total_energy_j / c.tokens, 1e-12);
  EXPECT_LT(single.kwh_low, single.kwh);
  EXPECT_GT(single.kwh_high, single.kwh);
}

TEST(PhysicalModel, FasterHardwareFinishesSooner) {
  const PhysicalParams p = table().params();
  TransformerConfig c = bert_10x640();
  c.dtype = "fp16";
  const auto v100 = predict_transformer(c, {1, Strategy::kBaseline}, table().find("v100"), p);
  const auto h100 = predict_transformer(c, {1, Strategy::kBaseline}, table().find("h100-sxm"), p);
  EXPECT_LT(h100.time_s, v100.time_s);
}

TEST(PhysicalModel, RejectsImpossibleConfigurations) {
  const PhysicalParams p = table().params();
  const DeviceSpec& gpu = table().find("t4");
  TransformerConfig c = bert_10x640();
  EXPECT_THROW(predict_transformer(c, {0, Strategy::kBaseline}, gpu, p), std::invalid_argument);
  EXPECT_THROW(predict_transformer(c, {2, Strategy::kBaseline}, gpu, p), std::invalid_argument);
  EXPECT_THROW(predict_transformer(c, {1, Strategy::kFsdp}, gpu, p), std::invalid_argument);
  EXPECT_THROW(predict_transformer(c, {3, Strategy::kTensorParallel}, gpu, p), std::invalid_argument);
  EXPECT_THROW(predict_transformer(c, {16, Strategy::kDataParallel}, gpu, p), std::invalid_argument);
  TransformerConfig huge = c;
  huge.layers = 96;
  huge.hidden = 12288;
  huge.heads = 96;
  try {
    predict_transformer(huge, {1, Strategy::kBaseline}, gpu, p);
    FAIL() << "a 175B model on one T4 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("GB per device"), std::string::npos) << e.what();
  }
  c.hidden = 650;  // not divisible by 8 heads
  EXPECT_THROW(predict_transformer(c, {1, Strategy::kBaseline}, gpu, p), std::invalid_argument);
  c = bert_10x640();
  c.dtype = "fp7";
  EXPECT_THROW(predict_transformer(c, {1, Strategy::kBaseline}, gpu, p), std::invalid_argument);
  EXPECT_THROW(predict_work({}, gpu, p, "fp32"), std::invalid_argument);
  EXPECT_THROW(predict_work({{"x", "matmul", -1, 0, -1}}, gpu, p, "fp32"), std::invalid_argument);
}

}  // namespace
}  // namespace meganeura::energy

namespace meganeura::energy {
namespace {}  // namespace
}  // namespace meganeura::energy
