#include "energy/physical_model.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

#include "test_support.h"

namespace meganeura::energy {
namespace {

using testing_support::table;

TEST(HardwareTable, ListsEveryRequiredDeviceWithSources) {
  for (const char* key : {"v100-sxm2", "v100-pcie", "t4", "rtx-2080-ti", "rtx-3090", "rtx-4090", "a10", "l4", "l40s",
                          "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "mi250x", "mi300x"}) {
    const DeviceSpec& d = table().find(key);
    for (const char* field : {"peak_tflops", "memory_bandwidth_gbs", "max_w", "idle_w", "link_gbs"}) {
      EXPECT_FALSE(d.sources.at(field).empty()) << key << " " << field;
    }
    EXPECT_GT(d.memory_gb, 0) << key;
    EXPECT_TRUE(d.tensor_cores) << key;
    EXPECT_FALSE(d.sources.at("memory_gb").empty()) << key;
    EXPECT_FALSE(d.sources.at("tensor_cores").empty()) << key;
    // NVIDIA publishes base and boost clocks, AMD only a peak engine clock.
    if (d.name.rfind("NVIDIA", 0) == 0) {
      ASSERT_GT(d.boost_clock_mhz, 0) << key;
      EXPECT_FALSE(d.sources.at("base_clock_mhz").empty()) << key;
      EXPECT_FALSE(d.sources.at("boost_clock_mhz").empty()) << key;
      EXPECT_DOUBLE_EQ(d.sustained_clock_ratio(), d.base_clock_mhz / d.boost_clock_mhz) << key;
    } else {
      EXPECT_DOUBLE_EQ(d.sustained_clock_ratio(), 1.0) << key;
    }
  }
  EXPECT_DOUBLE_EQ(table().find("h100-sxm").peak_flops("bf16"), 989.4e12);
  EXPECT_DOUBLE_EQ(table().find("H200").memory_bandwidth_gbs, 4800);
  EXPECT_DOUBLE_EQ(table().find("NVIDIA A100-SXM4-80GB").max_w, 400);
  EXPECT_DOUBLE_EQ(table().find("t4").sustained_clock_ratio(), 585.0 / 1590.0);
  EXPECT_EQ(table().find("RTX 2080 Ti").key, "rtx-2080-ti");
  EXPECT_EQ(table().find("NVIDIA GeForce RTX 2080 Ti").key, "rtx-2080-ti");
  EXPECT_EQ(table().find("Tesla V100-PCIE-32GB").key, "v100-pcie");
  EXPECT_EQ(table().find("NVIDIA H200 141GB HBM3e").key, "h200");
  EXPECT_EQ(table().find("NVIDIA H100 PCIe").key, "h100-pcie");
  EXPECT_EQ(table().find("NVIDIA L40S").key, "l40s");
  EXPECT_EQ(table().find("AMD Instinct MI300X").key, "mi300x");
  EXPECT_EQ(table().find("AMD Instinct MI250X").key, "mi250x");
  EXPECT_EQ(table().try_find("nvidia"), nullptr);
}

// A device entry with every required number and its source, and `extra` lines appended.
std::string device_toml(const std::string& extra, const std::string& extra_sources = "") {
  return R"(
[x]
name = "X"
peak_tflops = { fp32 = 1.0, fp16 = 8.0 }
memory_bandwidth_gbs = 10.0
idle_w = 1.0
max_w = 2.0
link_gbs = 1.0
)" + extra +
         R"(
[x.source]
peak_tflops = "a"
memory_bandwidth_gbs = "a"
max_w = "a"
idle_w = "a"
link_gbs = "a"
)" + extra_sources;
}

TEST(HardwareTable, ChecksClockRangeAndTensorCores) {
  const std::string cited = "base_clock_mhz = \"a\"\nboost_clock_mhz = \"a\"\n";
  const HardwareTable ok =
      HardwareTable::parse(device_toml("base_clock_mhz = 500\nboost_clock_mhz = 2000", cited), "t");
  EXPECT_DOUBLE_EQ(ok.find("x").sustained_clock_ratio(), 0.25);
  EXPECT_DOUBLE_EQ(HardwareTable::parse(device_toml(""), "t").find("x").sustained_clock_ratio(), 1.0);
  const auto rejects = [](const std::string& text, const std::string& why) {
    try {
      HardwareTable::parse(text, "t.toml");
      ADD_FAILURE() << "accepted: " << why;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  rejects(device_toml("base_clock_mhz = 2500\nboost_clock_mhz = 2000", cited), "at most boost_clock_mhz");
  rejects(device_toml("base_clock_mhz = 500", cited), "lacks 'boost_clock_mhz'");
  rejects(device_toml("base_clock_mhz = 500\nboost_clock_mhz = 2000"), "no source for 'base_clock_mhz'");
  rejects(device_toml("tensor_cores = 3"), "tensor_cores must be true or false");
  // Tensor cores claimed, but the half-precision rate no faster than fp32.
  std::string slow = device_toml("");
  slow.replace(slow.find("fp16 = 8.0"), 10, "fp16 = 1.0");
  rejects(slow, "no fp16/bf16 matrix rate above its fp32 rate");
  slow.replace(slow.find("link_gbs = 1.0"), 14, "link_gbs = 1.0\ntensor_cores = false");
  EXPECT_FALSE(HardwareTable::parse(slow, "t").find("x").tensor_cores);
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

TransformerConfig shaped(int layers, int hidden, int heads, int vocab, double batch, double seq, double tokens) {
  TransformerConfig c;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = heads;
  c.vocab = vocab;
  c.batch = batch;
  c.seq = seq;
  c.tokens = tokens;
  return c;
}

TransformerConfig bert_10x640() { return shaped(10, 640, 8, 30522, 32, 66, 8.2e6); }

// FFN-only TP splits the FFN matmuls and their weights N ways and leaves attention whole: every
// dispatch's FLOPs against the formulas written out here (t = B S tokens).
TEST(PhysicalModel, FfnOnlyTensorParallelSplitsOnlyTheFfn) {
  TransformerConfig c = shaped(1, 256, 4, 0, 2, 64, 1e6);
  c.ff = 1024;
  const double t = 2 * 64, d = 256, f = 1024, s = 64;
  std::map<std::string, double> ffn, megatron;
  for (const WorkItem& w : transformer_step_work(c, 2, 1, TpScheme::kFfnEager)) ffn[w.name] = w.flops;
  for (const WorkItem& w : transformer_step_work(c, 2, 1, TpScheme::kMegatron)) megatron[w.name] = w.flops;
  EXPECT_DOUBLE_EQ(ffn["layer0.qkv.fwd"], 2 * t * d * 3 * d);
  EXPECT_DOUBLE_EQ(megatron["layer0.qkv.fwd"], 2 * t * d * 3 * d / 2);
  EXPECT_DOUBLE_EQ(ffn["layer0.attn_scores.fwd"], 2 * t * s * d);
  EXPECT_DOUBLE_EQ(ffn["layer0.attn_out.bwd_weight"], 2 * t * d * d);
  EXPECT_DOUBLE_EQ(ffn["layer0.ffn_up.fwd"], 2 * t * d * f / 2);
  EXPECT_DOUBLE_EQ(ffn["layer0.ffn_down.bwd_input"], 2 * t * f / 2 * d);
  EXPECT_DOUBLE_EQ(megatron["layer0.ffn_up.fwd"], ffn["layer0.ffn_up.fwd"]);
  // Adam, 12 FLOPs per parameter: attention weights whole, FFN weights halved, biases and
  // norms (9 d + f) whole.
  EXPECT_DOUBLE_EQ(ffn["layer0.adam"], 12 * (4 * d * d + 2 * d * f / 2 + 9 * d + f));
}

// FFN-only eager TP per layer and device step: two all-reduces of the B S d activations (half
// of Megatron's four) and 8 + 2 + 4 x 10 / grad_accum ops on sharded tensors, each priced at
// sharded_op_s; Megatron TP pays none.
TEST(PhysicalModel, FfnOnlyTensorParallelPaysPerShardedOp) {
  const DeviceSpec& gpu = table().find("rtx-2080-ti");
  TransformerConfig c = shaped(6, 384, 6, 0, 16, 64, 4e6);
  c.ff = 1536;
  c.grad_accum = 2;
  c.dtype = "fp16";
  const ParallelConfig ffn{4, Strategy::kTensorParallel, false, true, TpScheme::kFfnEager};
  // Six heads do not split four ways under Megatron TP: priced as a measured run would be.
  const ParallelConfig megatron{4, Strategy::kTensorParallel, false, false, TpScheme::kMegatron};
  const RunFeatures f = transformer_features(c, ffn, gpu);
  const RunFeatures m = transformer_features(c, megatron, gpu);
  EXPECT_DOUBLE_EQ(f.sharded_ops, 6 * (8 + 2 + 4 * 10 / 2.0));  // 180
  EXPECT_DOUBLE_EQ(m.sharded_ops, 0);
  EXPECT_DOUBLE_EQ(f.collectives, 3 * 2 * 6);
  EXPECT_DOUBLE_EQ(m.collectives, 3 * 4 * 6);
  // All-reduce of 16 x 64 x 384 fp16 values: 2 (N-1)/N of them over the table's link.
  const double allreduce_s = 16 * 64 * 384 * 2 * 2 * 0.75 / (gpu.link_gbs * 1e9);
  EXPECT_NEAR(f.comm_tp_s, 6 * 2 * allreduce_s, 1e-12);
  EXPECT_NEAR(m.comm_tp_s, 6 * 4 * allreduce_s, 1e-12);
  EXPECT_DOUBLE_EQ(f.steps, 4e6 / (16 * 64));  // TP: every device sees every token
  PhysicalParams p = table().params();
  p.sharded_op_s = 250e-6;
  const TimeBreakdown tf = time_breakdown(f, p);
  EXPECT_NEAR(tf.sharded_ops, 4e6 / (16 * 64) * 180 * 250e-6, 1e-9);
  EXPECT_DOUBLE_EQ(time_breakdown(m, p).sharded_ops, 0);
  // Host time, drawn near idle power: part of the fixed time, and of the "host" bound.
  const PhysicalPrediction r = predict_transformer(c, ffn, gpu, p);
  EXPECT_NEAR(tf.fixed(), tf.startup + tf.step_fixed + tf.launch + tf.optimizer + tf.comm_latency + tf.sharded_ops,
              1e-9);
  double sharded = -1;
  for (const Term& term : r.time_terms) sharded = term.name == "sharded_ops" ? term.value : sharded;
  EXPECT_NEAR(sharded, tf.sharded_ops, 1e-9);
  EXPECT_EQ(r.bound, "host");
  EXPECT_EQ(r.tp_scheme, TpScheme::kFfnEager);
}

// Attention heads are not split by FFN-only TP, so they need not divide by N; the FFN does.
TEST(PhysicalModel, FfnOnlyTensorParallelNeedsOnlyTheFfnDivisible) {
  const PhysicalParams p = table().params();
  const DeviceSpec& gpu = table().find("rtx-2080-ti");
  TransformerConfig c = shaped(3, 192, 3, 0, 32, 66, 8e6);
  c.ff = 768;
  EXPECT_THROW(predict_transformer(c, {2, Strategy::kTensorParallel, false, true, TpScheme::kMegatron}, gpu, p),
               std::invalid_argument);
  EXPECT_NO_THROW(predict_transformer(c, {2, Strategy::kTensorParallel, false, true, TpScheme::kFfnEager}, gpu, p));
  c.ff = 770;
  try {
    predict_transformer(c, {4, Strategy::kTensorParallel, false, true, TpScheme::kFfnEager}, gpu, p);
    FAIL() << "an FFN of 770 split four ways was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("FFN-only tensor parallel over 4 GPUs needs ff (770)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(parse_tp_scheme("FFN"), TpScheme::kFfnEager);
  EXPECT_EQ(parse_tp_scheme("megatron"), TpScheme::kMegatron);
  EXPECT_THROW(parse_tp_scheme("pipeline"), std::invalid_argument);
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

// Every knob of [model] and [host] goes through one list: written, read back, identical (a
// negative comm_overlap too, which a fit can produce), and each knob in the JSON report.
TEST(HardwareTable, ModelAndHostKnobsRoundTrip) {
  const auto dir = std::filesystem::temp_directory_path() / ("mg_knobs_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "hardware.toml").string();
  std::filesystem::copy_file(MEGANEURA_SOURCE_DIR "/data/hardware.toml", path);
  PhysicalParams p;
  double v = 1;
  for (const ParamKnob& k : param_knobs()) p.*k.member = (v += 0.125) * 0.1 * k.unit;
  p.comm_overlap = -0.25;
  p.compute_efficiency = 0.8;  // efficiencies stay within (0, 1]
  p.memory_efficiency = 0.9;
  p.link_efficiency = 0.6;
  FittedRange range{{"t4", "l4"}, 1e6, 2e8, 256, 4096, 1, 4, {"baseline", "fsdp"}, ""};
  write_model_params(path, p, range, "round trip");
  const HardwareTable t = HardwareTable::load(path);
  for (const ParamKnob& k : param_knobs()) {
    EXPECT_NEAR(t.params().*k.member, p.*k.member, 1e-12 * std::abs(p.*k.member)) << k.key;
  }
  EXPECT_EQ(t.fitted().gpus, range.gpus);
  EXPECT_EQ(t.fitted().strategies, range.strategies);
  EXPECT_DOUBLE_EQ(t.fitted().max_tokens_per_step, 4096);
  EXPECT_EQ(t.fitted().max_gpus, 4);
  EXPECT_EQ(t.fitted().source, "round trip");
  EXPECT_EQ(t.keys(), table().keys());  // every device kept
  std::filesystem::remove_all(dir);
}

TransformerConfig gpt_small() {
  TransformerConfig c = shaped(2, 128, 2, 50257, 8, 128, 3.2e6);
  c.grad_accum = 8;
  c.dtype = "fp16";
  c.lm_head = true;
  return c;
}

// The language-model head: a t x d x V matmul forward and two backward, and the cross-entropy
// over the t x V logits in fp32; for a 2 x 128 model it is most of the step's work.
TEST(PhysicalModel, LanguageModelHeadPricesTheLogits) {
  const TransformerConfig c = gpt_small();
  TransformerConfig no_head = c;
  no_head.lm_head = false;
  const double t = 8 * 128, d = 128, v = 50257;
  double head_flops = 0, head_bytes = 0;
  int head_items = 0;
  for (const WorkItem& w : transformer_step_work(c)) {
    if (w.name.rfind("lm_head", 0) != 0 && w.name.rfind("cross_entropy", 0) != 0) continue;
    head_flops += w.flops;
    head_bytes += w.bytes;
    ++head_items;
  }
  EXPECT_EQ(head_items, 5);
  EXPECT_DOUBLE_EQ(head_flops, 3 * 2 * t * d * v + 15 * t * v);
  EXPECT_DOUBLE_EQ(head_bytes, 3 * (t * d + d * v + t * v) * 2 + 5 * t * v * 4);
  EXPECT_EQ(transformer_step_work(c).size(), transformer_step_work(no_head).size() + 5);
  const DeviceSpec& t4 = table().find("t4");
  const PhysicalParams p = table().params();
  const double with_head = predict_transformer(c, {1, Strategy::kBaseline}, t4, p).time_s;
  const double without = predict_transformer(no_head, {1, Strategy::kBaseline}, t4, p).time_s;
  EXPECT_GT(with_head, 2 * without);
}

// An eager optimizer steps each parameter tensor with kernels of its own: 16 per layer (Q, K,
// V, output, FFN up and down weights and biases, two norms), 4 for the embeddings, 2 for the
// head, spread over the micro-steps of one optimizer step.
TEST(PhysicalModel, OptimizerHostCostPerParameterTensor) {
  const TransformerConfig c = gpt_small();
  EXPECT_DOUBLE_EQ(parameter_tensors(c.resolved()), 16 * 2 + 4 + 2);
  const RunFeatures f = transformer_features(c, {1, Strategy::kBaseline}, table().find("t4"));
  EXPECT_DOUBLE_EQ(f.optimizer_tensors, 38.0 / 8);
  PhysicalParams p = table().params();
  const TimeBreakdown t = time_breakdown(f, p);
  EXPECT_NEAR(t.optimizer, f.steps * 38.0 / 8 * p.optimizer_tensor_s, 1e-12 * t.optimizer);
  p.optimizer_tensor_s *= 2;
  EXPECT_NEAR(time_breakdown(f, p).total() - t.total(), t.optimizer, 1e-9 * t.optimizer);
}

// Utilisation comes from the operator mix: the 2 x 128 model on an H100 spends its steps on the
// host (launches, per-step and optimizer costs) and a 12 x 1024 one on a T4 in arithmetic.
TEST(PhysicalModel, SmallModelOnABigGpuIsHostBound) {
  const PhysicalParams p = table().params();
  TransformerConfig small = gpt_small();
  small.dtype = "bf16";
  const PhysicalPrediction h100 = predict_transformer(small, {1, Strategy::kBaseline}, table().find("h100-sxm"), p);
  EXPECT_EQ(h100.bound, "host");
  double compute = 0, rest = 0;
  for (const Term& t : h100.time_terms) (t.name == "compute" ? compute : rest) += t.value;
  EXPECT_LT(compute, 0.1 * rest);
  TransformerConfig big = small;
  big.dtype = "fp16";
  big.layers = 12, big.hidden = 1024, big.heads = 16, big.batch = 8, big.seq = 512;
  EXPECT_EQ(predict_transformer(big, {1, Strategy::kBaseline}, table().find("t4"), p).bound, "compute");
}

// A run inside the fitted range carries no warning; an unseen GPU, a larger model or batch, more
// GPUs or another strategy each carry one.
TEST(PhysicalModel, WarnsOutsideTheFittedRange) {
  const FittedRange& r = table().fitted();
  ASSERT_FALSE(r.empty());
  TransformerConfig c = gpt_small();
  EXPECT_TRUE(range_warnings(r, "a100-40gb", c, {1, Strategy::kBaseline}).empty());
  const auto w = range_warnings(r, "h100-sxm", c, {1, Strategy::kBaseline});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("GPU h100-sxm is not among the fitted GPUs (a100-40gb, rtx-2080-ti, t4, v100-pcie)"),
            std::string::npos)
      << w[0];
  c.seq = 4096;
  c.layers = 48;
  c.hidden = 4096;
  c.heads = 32;
  EXPECT_EQ(range_warnings(r, "t4", c, {8, Strategy::kDataParallel}).size(), 4u);
  EXPECT_TRUE(range_warnings(FittedRange{}, "h100-sxm", c, {8, Strategy::kDataParallel}).empty());
}

}  // namespace
}  // namespace meganeura::energy
