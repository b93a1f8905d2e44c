// The physical energy model: a roofline over the work of one training step, priced with the
// hardware table. It needs no measured run time:
//   T      = startup + steps * (per-step fixed + dispatches * launch + tensors / grad_accum * optimizer
//                               + compute / (peak * base/boost clock * eff_c)
//                               + traffic / (bandwidth * eff_m)
//                               + exposed communication (bandwidth and latency terms)
//                               + sharded-tensor ops * their host cost (FFN-only eager TP))
//   E      = N * P_idle * T                               static power over the wall time
//          + f_busy * N * (P_max - P_idle) * T_busy      compute, memory and link time
//          + f_fixed * N * (P_max - P_idle) * T_fixed    launch-bound and fixed time, near idle
//          + e_flop * FLOPs + e_byte * bytes             dynamic energy of the work
//          + (P_host * nodes + P_rank * N) * T           CPU and DRAM: node, and one process per GPU
// Every time term is a coefficient times a feature computed from the work, the strategy and the
// datasheet (RunFeatures), so fitting is least squares in the coefficients. A board power limit
// below or above the TDP scales the compute term by the clock it sustains, and the compute-bound
// busy power and energy per FLOP by its voltage (PowerLimitEffect); at the TDP nothing changes.
#pragma once

#include <string>
#include <vector>

#include "energy/hardware.h"
#include "energy/reference_model.h"
#include "energy/work.h"

namespace meganeura::energy {

struct TransformerConfig {
  int layers = 0;
  int hidden = 0;
  int heads = 0;     // 0: hidden / 64
  int ff = 0;        // 0: 4 * hidden
  int vocab = 0;     // embedding rows (trained, so priced); 0: none
  double batch = 0;  // sequences per device step (per data-parallel rank)
  double seq = 0;
  double tokens = 0;  // tokens over the whole run
  int grad_accum = 1;
  std::string dtype = "fp32";  // arithmetic dtype of the matmuls: fp32, tf32, fp16, bf16
  // A language-model head: logits over the vocabulary and their cross-entropy (GPT-style
  // causal language modelling). Without it the model ends in a small classifier (BERT-style).
  bool lm_head = false;

  // Validates and fills defaults; throws "[energy] ..." naming the bad field.
  TransformerConfig resolved() const;
};

// How tensor parallelism splits a layer. Megatron TP splits attention and FFN and all-reduces
// twice forward and twice backward per layer. The FFN-only eager scheme splits only the FFN
// (column- then row-parallel, as sharded DTensor weights in eager PyTorch): attention runs whole
// on every device, one all-reduce forward and one backward per layer, and every op on the
// sharded FFN tensors (its matmuls, activation and collectives, and the optimizer's kernels for
// its four parameter tensors) pays the host cost of a sharded-tensor op (`sharded_op_s`).
enum class TpScheme { kMegatron, kFfnEager };
// "megatron" or "ffn" (case-insensitive); throws on others.
TpScheme parse_tp_scheme(const std::string& text);
std::string tp_scheme_name(TpScheme s);

struct ParallelConfig {
  int gpus = 1;
  Strategy strategy = Strategy::kBaseline;
  bool over_pcie = false;  // use the PCIe bandwidth instead of the table's GPU link
  // Reject configurations that cannot run (memory, head split). Off when pricing runs that
  // were measured, since they evidently did run.
  bool check_feasible = true;
  TpScheme tp_scheme = TpScheme::kMegatron;  // with Strategy::kTensorParallel
  double power_limit_w = 0;                  // board power limit per GPU; 0: the default limit (max_w)
};

// A board held at a power limit (docs/energy.md, "Power limit"). Compute-bound work holds the
// board at its limit; its sustained clock f follows from the limit through dynamic power
// P - P_idle ~ f V^2, with the voltage flat at its floor up to kVoltageFloorShare of the boost
// clock and rising in proportion to the clock above it (so ~ f^3 there). Compute time scales
// with 1/f, the energy of each operation with V^2; memory-bound, communication and host time
// are left as they are (the memory clock is not lowered, and those phases draw less than the
// limit). At the default limit every ratio is exactly 1.
struct PowerLimitEffect {
  double limit_w = 0;       // the limit in force
  double clock_mhz = 0;     // sustained clock of compute-bound work under it
  double clock_ratio = 1;   // that clock over the one at the default limit (the base clock)
  double power_ratio = 1;   // compute-bound dynamic power over that at the default limit (f V^2)
  double energy_ratio = 1;  // energy per operation over that at the default limit (V^2)
};
inline constexpr double kVoltageFloorShare = 0.6;
// Throws "[energy] ..." when the limit lies outside the device's range, or the entry gives no
// range or no clocks and the limit differs from the default. `limit_w` 0 is the default limit.
PowerLimitEffect power_limit_effect(const DeviceSpec& device, double limit_w);

// Time and energy of one dispatch (or of one layer, summed over the run).
struct CostEstimate {
  std::string name;
  std::string kind;
  int layer = -1;
  double flops = 0;
  double bytes = 0;
  double time_s = 0;
  double energy_j = 0;
  std::string bound;  // "compute", "memory" or "launch"
};

// One named term of the time or energy sum (whole run; energy over all devices and the host).
struct Term {
  std::string name;
  double value = 0;
};

struct PhysicalPrediction {
  std::string device;
  int gpus = 1;
  Strategy strategy = Strategy::kBaseline;
  TpScheme tp_scheme = TpScheme::kMegatron;  // with Strategy::kTensorParallel
  PowerLimitEffect power_limit;              // the limit the run was priced at
  double average_power_w = 0;                // per device: device energy over the wall time
  // What bounds a step: "host" (per-step, launch and optimizer host costs), "compute",
  // "memory" or "communication", whichever takes the most of the steps' time.
  std::string bound;
  double steps = 0;            // device steps (micro-batches) over the run
  double step_time_s = 0;      // one device step including exposed communication
  double comm_time_s = 0;      // exposed communication per device step
  double time_s = 0;           // whole run
  double efficiency = 1;       // predicted eta = (T_1 / T_N) / N
  double device_energy_j = 0;  // per device
  double host_energy_j = 0;
  double total_energy_j = 0;
  double kwh = 0;
  double joules_per_token = 0;
  double kwh_low = 0;  // interval
  double kwh_high = 0;
  // The time terms (seconds, summing to time_s) and energy terms (joules, all devices and the
  // host, summing to total_energy_j).
  std::vector<Term> time_terms;
  std::vector<Term> energy_terms;
  // Per layer, per device, over the whole run; "other" holds the embedding and optimizer
  // tail and a final "comm+overhead" entry the rest, so the entries sum to the device totals.
  std::vector<CostEstimate> layers;
  // Per device step. For a transformer, layer 0 stands for every layer (they are alike),
  // followed by the embedding and optimizer tail.
  std::vector<CostEstimate> dispatches;
};

// What the model needs of one run, independent of its coefficients: per device step, the
// roofline times at the datasheet peak and bandwidth, the dispatch count, communication at the
// datasheet link rate per strategy and the number of collectives; and the counts that scale
// them to the run. Time is linear in the coefficients over these features.
struct RunFeatures {
  int gpus = 1, nodes = 1;
  double steps = 0;                  // device steps (micro-batches) over the run
  double dispatches = 0;             // per device step (the optimizer spread over grad_accum)
  double optimizer_tensors = 0;      // parameter tensors updated per device step (tensors / grad_accum)
  double compute_s = 0;              // per device step, at the peak scaled to the sustained (base) clock
  double memory_s = 0;               // per device step, at full bandwidth
  double comm_sharded_s = 0;         // DP/FSDP collectives per device step at the datasheet link rate
  double comm_tp_s = 0;              // TP all-reduces per device step at the datasheet link rate
  double collectives = 0;            // ring hops of collectives per device step (N - 1 per collective)
  double sharded_ops = 0;            // ops on sharded (DTensor) tensors per device step (FFN-only eager TP)
  double flops = 0, bytes = 0;       // per device step
  double idle_w = 0, dynamic_w = 0;  // per device: idle power and max - idle
  double e_flop = 0, e_byte = 0;     // J per FLOP and per byte (e_flop at the power limit's voltage)
  double compute_power_scale = 1;    // busy power of compute time at the power limit (f V^2), 1 at the default
};

RunFeatures transformer_features(const TransformerConfig& cfg, const ParallelConfig& par, const DeviceSpec& device);

struct TimeBreakdown {
  double startup = 0, step_fixed = 0, launch = 0, optimizer = 0, compute = 0, memory = 0, comm_bandwidth = 0,
         comm_latency = 0, sharded_ops = 0;
  double busy() const { return compute + memory + comm_bandwidth; }
  double fixed() const { return startup + step_fixed + launch + optimizer + comm_latency + sharded_ops; }
  double total() const { return busy() + fixed(); }
};
TimeBreakdown time_breakdown(const RunFeatures& f, const PhysicalParams& p);
// static, busy, fixed, dynamic, host (joules, all devices).
std::vector<Term> energy_breakdown(const RunFeatures& f, const PhysicalParams& p, const TimeBreakdown& t);

// The work of one training step of one transformer layer stack on one device, forward,
// backward and optimizer, with matmuls split `tp` ways (only the FFN's with TpScheme::kFfnEager).
std::vector<WorkItem> transformer_step_work(const TransformerConfig& cfg, int tp = 1, int optimizer_shards = 1,
                                            TpScheme scheme = TpScheme::kMegatron);

// Ops on sharded tensors per layer and device step of FFN-only eager TP: the FFN's eight
// dispatches (three per matmul, two for the activation), its two all-reduces, and
// kOptimizerOpsPerTensor optimizer ops for each of its four parameter tensors per optimizer step.
inline constexpr double kOptimizerOpsPerTensor = 10;
double sharded_ops_per_layer(int grad_accum);

PhysicalPrediction predict_transformer(const TransformerConfig& cfg, const ParallelConfig& par,
                                       const DeviceSpec& device, const PhysicalParams& params);

// Prices `work` (one step of a compiled Program) on one device; `steps` scales the totals and
// `tokens_per_step` (0: unknown) gives J/token.
PhysicalPrediction predict_work(const std::vector<WorkItem>& work, const DeviceSpec& device,
                                const PhysicalParams& params, const std::string& dtype, double steps = 1,
                                double tokens_per_step = 0);

// Bytes per element of a dtype name ("fp32" -> 4); throws on unknown names.
double dtype_bytes(const std::string& dtype);

// Parameters (weights, biases, norms, embeddings) and parameter tensors of a resolved config.
double model_parameters(const TransformerConfig& c);
double parameter_tensors(const TransformerConfig& c);

// One line per way the run lies outside `range` (a GPU not in it, a model, batch, GPU count or
// strategy beyond what it covers); empty when inside, or when the range is empty.
std::vector<std::string> range_warnings(const FittedRange& range, const std::string& device_key,
                                        const TransformerConfig& cfg, const ParallelConfig& par);

}  // namespace meganeura::energy
