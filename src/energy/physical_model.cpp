#include "energy/physical_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace meganeura::energy {
namespace {

[[noreturn]] void invalid(const std::string& what) { throw std::invalid_argument("[energy] " + what); }

// Dynamic power at clock f with the voltage flat below f_floor and proportional to f above it.
double dvfs_power(double f, double f_floor) { return f * std::max(f, f_floor) * std::max(f, f_floor); }

struct LayerShape {
  double tokens;               // B * S
  double d, f, s, heads, act;  // act: bytes per activation element
};

void push(std::vector<WorkItem>& out, int layer, const std::string& op, const char* kind, double flops, double bytes) {
  const std::string prefix = layer >= 0 ? "layer" + std::to_string(layer) + "." : "";
  out.push_back({prefix + op, kind, flops, bytes, layer});
}

// Forward and backward dispatches of one encoder layer. Backward of a matmul is two matmuls
// (input and weight gradients); backward of an elementwise op reads twice what it wrote.
// Attention is split `tp_attn` ways, the FFN `tp_ffn` ways.
void layer_work(std::vector<WorkItem>& out, int layer, const LayerShape& x, int tp_attn, int tp_ffn) {
  const double t = x.tokens, d = x.d, f = x.f / tp_ffn, h = x.heads / tp_attn, a = x.act;
  const double dq = d / tp_attn;  // this device's share of the attention width
  auto matmul = [&](const std::string& op, double m, double k, double n) {
    const double flops = 2 * m * k * n;
    const double bytes = (m * k + k * n + m * n) * a;
    push(out, layer, op + ".fwd", "matmul", flops, bytes);
    push(out, layer, op + ".bwd_input", "matmul", flops, bytes);
    push(out, layer, op + ".bwd_weight", "matmul", flops, bytes);
  };
  auto eltwise = [&](const std::string& op, double elems, double flops_per_elem) {
    push(out, layer, op + ".fwd", "elementwise", elems * flops_per_elem, 2 * elems * a);
    push(out, layer, op + ".bwd", "elementwise", 2 * elems * flops_per_elem, 3 * elems * a);
  };
  eltwise("ln_attn", t * d, 8);
  matmul("qkv", t, d, 3 * dq);
  const double scores = t * x.s * h;  // B * heads * S * S
  push(out, layer, "attn_scores.fwd", "attention", 2 * t * x.s * dq, (2 * t * dq + scores) * a);
  eltwise("softmax", scores, 5);
  push(out, layer, "attn_values.fwd", "attention", 2 * t * x.s * dq, (scores + 2 * t * dq) * a);
  push(out, layer, "attn.bwd", "attention", 8 * t * x.s * dq, (3 * scores + 6 * t * dq) * a);
  matmul("attn_out", t, dq, d);
  eltwise("residual_attn", t * d, 2);
  eltwise("ln_ffn", t * d, 8);
  matmul("ffn_up", t, d, f);
  eltwise("gelu", t * f, 8);
  matmul("ffn_down", t, f, d);
  eltwise("residual_ffn", t * d, 2);
}

// The language-model head: logits = h W^T over the vocabulary (a matmul and its two backward
// matmuls) and the cross-entropy over the logits, forward and backward in fp32 as mixed-precision
// frameworks compute it.
void lm_head_work(std::vector<WorkItem>& out, const LayerShape& x, double vocab) {
  const double t = x.tokens, d = x.d, a = x.act, logits = t * vocab;
  const double flops = 2 * t * d * vocab, bytes = (t * d + d * vocab + logits) * a;
  for (const char* op : {"lm_head.fwd", "lm_head.bwd_input", "lm_head.bwd_weight"}) {
    push(out, -1, op, "matmul", flops, bytes);
  }
  push(out, -1, "cross_entropy.fwd", "elementwise", 5 * logits, 2 * logits * 4);
  push(out, -1, "cross_entropy.bwd", "elementwise", 10 * logits, 3 * logits * 4);
}

double layer_params(const TransformerConfig& c, int tp_attn, int tp_ffn) {
  const double d = c.hidden, f = c.ff;
  return 4 * d * d / tp_attn + 2 * d * f / tp_ffn + (9 * d + f);  // weights split, biases and norms kept
}

}  // namespace

double dtype_bytes(const std::string& dtype) {
  if (dtype == "fp64") return 8;
  if (dtype == "fp32" || dtype == "tf32") return 4;
  if (dtype == "fp16" || dtype == "bf16") return 2;
  if (dtype == "fp8" || dtype == "int8") return 1;
  invalid("unknown dtype '" + dtype + "' (expected fp32, tf32, fp16, bf16, fp8, int8, fp64)");
}

TransformerConfig TransformerConfig::resolved() const {
  TransformerConfig c = *this;
  if (c.layers <= 0) invalid("layers must be positive, got " + std::to_string(c.layers));
  if (c.hidden <= 0) invalid("hidden size must be positive, got " + std::to_string(c.hidden));
  if (c.heads == 0) c.heads = std::max(1, c.hidden / 64);
  if (c.heads < 0 || c.hidden % c.heads != 0) {
    invalid("hidden size " + std::to_string(c.hidden) + " is not divisible by " + std::to_string(c.heads) + " heads");
  }
  if (c.ff == 0) c.ff = 4 * c.hidden;
  if (c.ff < 0) invalid("ff must be positive");
  if (c.vocab < 0) invalid("vocab must be >= 0");
  if (!(c.batch > 0)) invalid("batch size must be positive");
  if (!(c.seq > 0)) invalid("sequence length must be positive");
  if (!(c.tokens > 0)) invalid("tokens must be positive");
  if (c.grad_accum <= 0) invalid("grad_accum must be positive");
  dtype_bytes(c.dtype);
  return c;
}

PowerLimitEffect power_limit_effect(const DeviceSpec& dev, double limit_w) {
  PowerLimitEffect e;
  const double f0 = dev.base_clock_mhz > 0 ? dev.base_clock_mhz : dev.boost_clock_mhz;
  e.limit_w = limit_w > 0 ? limit_w : dev.default_power_limit_w();
  e.clock_mhz = f0;
  if (!std::isfinite(limit_w) || limit_w < 0) invalid("power limit must be a positive number of watts");
  if (limit_w == 0 || limit_w == dev.default_power_limit_w()) return e;  // exactly today's prediction
  if (!(dev.power_limit_max_w > 0)) {
    invalid(dev.key + " has no power-limit range in the hardware table (power_limit_min_w, power_limit_max_w)");
  }
  if (!(dev.boost_clock_mhz > 0)) invalid(dev.key + " has no clocks in the hardware table to scale by a power limit");
  if (limit_w < dev.power_limit_min_w || limit_w > dev.power_limit_max_w) {
    invalid(fmt::format("power limit {:g} W lies outside {}'s range [{:g}, {:g}] W", limit_w, dev.key,
                        dev.power_limit_min_w, dev.power_limit_max_w));
  }
  // Compute-bound work holds the board at its limit: solve P(f) - P_idle = share * (TDP - P_idle).
  const double f_floor = kVoltageFloorShare * dev.boost_clock_mhz;
  const double share = (limit_w - dev.idle_w) / (dev.max_w - dev.idle_w);
  const double target = share * dvfs_power(f0, f_floor);
  double f = target <= dvfs_power(f_floor, f_floor) ? target / (f_floor * f_floor) : std::cbrt(target);
  f = std::min(f, dev.boost_clock_mhz);  // a higher limit cannot lift the clock past its boost
  e.clock_mhz = f;
  e.clock_ratio = f / f0;
  const double v = std::max(f, f_floor) / std::max(f0, f_floor);
  e.energy_ratio = v * v;
  e.power_ratio = e.clock_ratio * e.energy_ratio;
  return e;
}

TpScheme parse_tp_scheme(const std::string& text) {
  std::string s = text;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (s == "megatron") return TpScheme::kMegatron;
  if (s == "ffn") return TpScheme::kFfnEager;
  invalid("unknown TP scheme '" + text + "' (expected megatron or ffn)");
}

std::string tp_scheme_name(TpScheme s) { return s == TpScheme::kFfnEager ? "ffn" : "megatron"; }

double sharded_ops_per_layer(int grad_accum) { return 8 + 2 + 4 * kOptimizerOpsPerTensor / grad_accum; }

std::vector<WorkItem> transformer_step_work(const TransformerConfig& cfg, int tp, int optimizer_shards,
                                            TpScheme scheme) {
  const TransformerConfig c = cfg.resolved();
  const LayerShape shape{c.batch * c.seq, double(c.hidden), double(c.ff), c.seq, double(c.heads), dtype_bytes(c.dtype)};
  const int tp_attn = scheme == TpScheme::kFfnEager ? 1 : tp;
  std::vector<WorkItem> out;
  const double t = shape.tokens, d = c.hidden;
  if (c.vocab > 0) {
    push(out, -1, "embedding.fwd", "gather", t * d, (t * d * 2 + t) * shape.act);
    push(out, -1, "embedding.bwd", "scatter", t * d, t * d * 3 * shape.act);
  }
  for (int l = 0; l < c.layers; ++l) {
    layer_work(out, l, shape, tp_attn, tp);
    // Adam on fp32 master weights: read weight, grad, two moments; write three of them.
    const double p = layer_params(c, tp_attn, tp) / optimizer_shards;
    push(out, l, "adam", "optimizer", 12 * p, 28 * p);
  }
  if (c.vocab > 0) {
    const double p = double(c.vocab) * d / optimizer_shards;
    push(out, -1, "embedding.adam", "optimizer", 12 * p, 28 * p);
  }
  if (c.lm_head && c.vocab > 0) lm_head_work(out, shape, c.vocab);
  return out;
}

namespace {

// Rate a dispatch runs at: matmuls and attention on the dtype's (tensor-core) peak, everything
// else on the fp32 vector units; sustained, not peak: a compute-bound kernel holds the board at
// its power limit, where it runs at the base clock rather than the boost clock of the peaks.
double peak_for(const WorkItem& w, const DeviceSpec& dev, const std::string& dtype) {
  const bool vector = w.kind != "matmul" && w.kind != "attention";
  const std::string rate_dtype = vector ? "fp32" : dtype;
  return dev.peak_flops(dev.peak_tflops.count(rate_dtype) ? rate_dtype : dtype) * dev.sustained_clock_ratio();
}

void check_work(const WorkItem& w) {
  if (!(w.flops >= 0) || !(w.bytes >= 0) || !std::isfinite(w.flops) || !std::isfinite(w.bytes)) {
    invalid("work item '" + w.name + "' has negative or non-finite flops/bytes");
  }
}

// One dispatch: its compute and memory roofline time (busy, near full power) plus a fixed launch
// cost (the device waits on the host, near idle power). A launch-bound dispatch is one whose
// fixed cost exceeds its roofline time.
// Under a power limit `pl` the compute part runs at its clock and voltage.
CostEstimate price(const WorkItem& w, const DeviceSpec& dev, const PhysicalParams& p, const std::string& dtype,
                   const PowerLimitEffect& pl = {}) {
  check_work(w);
  const double t_compute = w.flops / (peak_for(w, dev, dtype) * p.compute_efficiency) / pl.clock_ratio;
  const double t_memory = w.bytes / (dev.memory_bandwidth_gbs * 1e9 * p.memory_efficiency);
  const double t_busy = t_compute + t_memory, t_launch = p.dispatch_overhead_s;
  CostEstimate e{w.name, w.kind, w.layer, w.flops, w.bytes, 0, 0, ""};
  e.time_s = t_busy + t_launch;
  e.bound = t_launch > t_busy ? "launch" : t_compute >= t_memory ? "compute" : "memory";
  const double dyn_w = dev.max_w - dev.idle_w;
  e.energy_j =
      p.idle_scale * dev.idle_w * e.time_s + p.busy_fraction * dyn_w * (t_compute * pl.power_ratio + t_memory) +
      p.fixed_power_fraction * dyn_w * t_launch +
      p.dynamic_scale * (dev.joules_per_flop(dtype) * pl.energy_ratio * w.flops + dev.joules_per_byte() * w.bytes);
  return e;
}

void add_work(RunFeatures& f, const WorkItem& w, double count, const DeviceSpec& dev, const std::string& dtype) {
  check_work(w);
  f.compute_s += count * w.flops / peak_for(w, dev, dtype);
  f.memory_s += count * w.bytes / (dev.memory_bandwidth_gbs * 1e9);
  f.dispatches += count;
  f.flops += count * w.flops;
  f.bytes += count * w.bytes;
}

void device_constants(RunFeatures& f, const DeviceSpec& dev, const std::string& dtype) {
  f.nodes = (f.gpus + 7) / 8;
  f.idle_w = dev.idle_w;
  f.dynamic_w = dev.max_w - dev.idle_w;
  f.e_flop = dev.joules_per_flop(dtype);
  f.e_byte = dev.joules_per_byte();
}

// Compute time at the limit's clock, compute-bound busy power and energy per operation at its voltage.
void apply_power_limit(RunFeatures& f, const PowerLimitEffect& e) {
  f.compute_s /= e.clock_ratio;
  f.compute_power_scale = e.power_ratio;
  f.e_flop *= e.energy_ratio;
}

void check_parallel(const TransformerConfig& c, const ParallelConfig& par) {
  if (par.gpus < 1) invalid("--gpus must be at least 1, got " + std::to_string(par.gpus));
  if (par.gpus > 1 && par.strategy == Strategy::kBaseline) {
    invalid("--gpus " + std::to_string(par.gpus) + " needs a strategy (dp, fsdp or tp)");
  }
  if (par.gpus == 1 && par.strategy != Strategy::kBaseline) {
    invalid("strategy " + strategy_name(par.strategy) + " needs --gpus of 2 or more");
  }
  if (par.gpus > 8) {
    invalid("--gpus " + std::to_string(par.gpus) + ": only single-node runs (up to 8 GPUs) are modelled");
  }
  if (!par.check_feasible || par.strategy != Strategy::kTensorParallel) return;
  const std::string n = std::to_string(par.gpus);
  if (par.tp_scheme == TpScheme::kFfnEager && c.ff % par.gpus != 0) {
    invalid("FFN-only tensor parallel over " + n + " GPUs needs ff (" + std::to_string(c.ff) + ") divisible by it");
  }
  if (par.tp_scheme == TpScheme::kMegatron && (c.heads % par.gpus != 0 || c.ff % par.gpus != 0)) {
    invalid("tensor parallel over " + n + " GPUs needs heads (" + std::to_string(c.heads) + ") and ff (" +
            std::to_string(c.ff) + ") divisible by it");
  }
}

std::vector<CostEstimate> per_layer(const std::vector<CostEstimate>& dispatches, double scale) {
  std::map<int, CostEstimate> by_layer;
  for (const CostEstimate& d : dispatches) {
    CostEstimate& l = by_layer[d.layer];
    l.layer = d.layer;
    l.name = d.layer >= 0 ? "layer" + std::to_string(d.layer) : "other";
    l.kind = "layer";
    l.flops += d.flops * scale;
    l.bytes += d.bytes * scale;
    l.time_s += d.time_s * scale;
    l.energy_j += d.energy_j * scale;
  }
  std::vector<CostEstimate> out;
  for (auto& [k, v] : by_layer) {
    if (k >= 0) out.push_back(v);
  }
  if (by_layer.count(-1)) out.push_back(by_layer[-1]);  // the tail after the layers
  return out;
}

}  // namespace

namespace {

// Communication per device step at the table's link rate (PCIe with `over_pcie`).
void add_communication(RunFeatures& f, const TransformerConfig& c, const ParallelConfig& par, const DeviceSpec& dev) {
  const int n = par.gpus;
  if (n < 2) return;
  const double bw = (par.over_pcie ? dev.pcie_gbs : dev.link_gbs) * 1e9;
  const double act = dtype_bytes(c.dtype), params = model_parameters(c);
  const double fr = double(n - 1) / n;  // ring collectives move fr (gather/scatter) or 2 fr (all-reduce)
  switch (par.strategy) {
    case Strategy::kBaseline: break;
    case Strategy::kDataParallel:
      // fp32 gradients all-reduced once per optimizer step.
      f.comm_sharded_s = params * 4 * 2 * fr / bw / c.grad_accum;
      f.collectives = (n - 1) * 1.0 / c.grad_accum;
      break;
    case Strategy::kFsdp:
      // Parameters gathered for forward and again for backward, fp32 gradients reduce-scattered,
      // one collective of each per wrapped layer.
      f.comm_sharded_s = (2 * params * act * fr + params * 4 * fr) / bw;
      f.collectives = (n - 1) * 3.0 * c.layers;
      break;
    case Strategy::kTensorParallel: {
      // Megatron: two all-reduces of the layer activations forward and two backward; FFN-only:
      // one of each (the row-parallel output forward, the column-parallel input gradient backward).
      const double per_layer = par.tp_scheme == TpScheme::kFfnEager ? 2 : 4;
      f.comm_tp_s = c.layers * per_layer * (c.batch * c.seq * c.hidden * act) * 2 * fr / bw;
      f.collectives = (n - 1) * per_layer * c.layers;
      break;
    }
  }
}

}  // namespace

double model_parameters(const TransformerConfig& c) {
  return c.layers * layer_params(c, 1, 1) + double(c.vocab) * c.hidden;
}

double parameter_tensors(const TransformerConfig& c) {
  // Per layer the Q, K, V, output, FFN-up and FFN-down weights and biases and two norms' scale
  // and shift (16); token and position embeddings and their norm (4); the head (2).
  return 16.0 * c.layers + (c.vocab > 0 ? 4 : 0) + 2;
}

RunFeatures transformer_features(const TransformerConfig& cfg, const ParallelConfig& par, const DeviceSpec& dev) {
  const TransformerConfig c = cfg.resolved();
  check_parallel(c, par);
  const int n = par.gpus;
  const bool tp = par.strategy == Strategy::kTensorParallel;
  RunFeatures f;
  f.gpus = n;
  TransformerConfig one = c;
  one.layers = 1;
  // TP splits the weights, and so their optimizer state, n ways already; only FSDP shards the
  // optimizer state of whole weights.
  const int shards = par.strategy == Strategy::kFsdp ? n : 1;
  for (const WorkItem& w : transformer_step_work(one, tp ? n : 1, shards, par.tp_scheme)) {
    // The optimizer runs once per grad_accum micro-steps: spread it over them.
    const double share = w.kind == "optimizer" ? 1.0 / c.grad_accum : 1.0;
    add_work(f, w, share * (w.layer >= 0 ? c.layers : 1), dev, c.dtype);
  }
  // An eager framework steps each parameter tensor with kernels of its own (sharded or not).
  f.optimizer_tensors = parameter_tensors(c) / c.grad_accum;
  f.steps = c.tokens / (c.batch * c.seq * (tp ? 1 : n));
  if (tp && par.tp_scheme == TpScheme::kFfnEager) f.sharded_ops = c.layers * sharded_ops_per_layer(c.grad_accum);
  add_communication(f, c, par, dev);
  device_constants(f, dev, c.dtype);
  apply_power_limit(f, power_limit_effect(dev, par.power_limit_w));
  return f;
}

TimeBreakdown time_breakdown(const RunFeatures& f, const PhysicalParams& p) {
  TimeBreakdown t;
  t.startup = p.startup_s;
  t.step_fixed = f.steps * p.step_overhead_s;
  t.launch = f.steps * f.dispatches * p.dispatch_overhead_s;
  t.optimizer = f.steps * f.optimizer_tensors * p.optimizer_tensor_s;
  t.compute = f.steps * f.compute_s / p.compute_efficiency;
  t.memory = f.steps * f.memory_s / p.memory_efficiency;
  t.comm_bandwidth = f.steps * (f.comm_sharded_s * (1 - p.comm_overlap) + f.comm_tp_s) / p.link_efficiency;
  t.comm_latency = f.steps * f.collectives * p.link_latency_s;
  t.sharded_ops = f.steps * f.sharded_ops * p.sharded_op_s;
  return t;
}

std::vector<Term> energy_breakdown(const RunFeatures& f, const PhysicalParams& p, const TimeBreakdown& t) {
  const double n = f.gpus;
  return {
      {"static", p.idle_scale * n * f.idle_w * t.total()},
      {"busy", p.busy_fraction * n * f.dynamic_w * (t.compute * f.compute_power_scale + t.memory + t.comm_bandwidth)},
      {"fixed", p.fixed_power_fraction * n * f.dynamic_w * t.fixed()},
      {"dynamic", p.dynamic_scale * n * f.steps * (f.e_flop * f.flops + f.e_byte * f.bytes)},
      {"host", (p.host_power_w * f.nodes + p.rank_power_w * n) * t.total()}};
}

namespace {

void fill_totals(PhysicalPrediction& r, const RunFeatures& f, const PhysicalParams& p) {
  const TimeBreakdown t = time_breakdown(f, p);
  r.gpus = f.gpus;
  r.steps = f.steps;
  r.time_s = t.total();
  r.step_time_s = (r.time_s - t.startup) / f.steps;
  r.comm_time_s = (t.comm_bandwidth + t.comm_latency) / f.steps;
  r.time_terms = {{"startup", t.startup},
                  {"step_fixed", t.step_fixed},
                  {"launch", t.launch},
                  {"optimizer", t.optimizer},
                  {"compute", t.compute},
                  {"memory", t.memory},
                  {"comm_bandwidth", t.comm_bandwidth},
                  {"comm_latency", t.comm_latency},
                  {"sharded_ops", t.sharded_ops}};
  r.energy_terms = energy_breakdown(f, p, t);
  r.total_energy_j = 0;
  for (const Term& e : r.energy_terms) r.total_energy_j += e.value;
  r.host_energy_j = r.energy_terms.back().value;
  r.device_energy_j = (r.total_energy_j - r.host_energy_j) / f.gpus;
  r.kwh = r.total_energy_j / 3.6e6;
  r.kwh_low = r.kwh * std::exp(-p.interval_ln);
  r.kwh_high = r.kwh * std::exp(p.interval_ln);
  const std::pair<double, const char*> shares[] = {{t.step_fixed + t.launch + t.optimizer + t.sharded_ops, "host"},
                                                   {t.compute, "compute"},
                                                   {t.memory, "memory"},
                                                   {t.comm_bandwidth + t.comm_latency, "communication"}};
  r.bound = std::max_element(std::begin(shares), std::end(shares))->second;
}

}  // namespace

namespace {

// Memory: fp32 master weights, gradients and two Adam moments (16 B/param), sharded by FSDP and
// TP, plus the stored activations of one micro-batch (and its logits with a language-model head).
void check_memory(const TransformerConfig& c, const ParallelConfig& par, const DeviceSpec& dev) {
  if (!par.check_feasible || dev.memory_gb <= 0) return;
  // FFN-only TP splits part of the weights and activations: checked as if unsplit, an upper bound.
  const bool megatron = par.strategy == Strategy::kTensorParallel && par.tp_scheme == TpScheme::kMegatron;
  const int state_shards = par.strategy == Strategy::kFsdp || megatron ? par.gpus : 1;
  const double act_tp = megatron ? par.gpus : 1;
  const double tokens = c.batch * c.seq;
  double activations =
      c.layers * tokens * (34.0 * c.hidden + 5.0 * c.heads * c.seq) / act_tp * dtype_bytes(c.dtype) / 2;
  if (c.lm_head) activations += tokens * c.vocab * (dtype_bytes(c.dtype) + 4);
  const double need_gb = (16 * model_parameters(c) / state_shards + activations) / 1e9;
  if (need_gb > dev.memory_gb) {
    invalid("configuration needs about " + std::to_string(int(need_gb + 0.5)) + " GB per device; " + dev.key + " has " +
            std::to_string(int(dev.memory_gb)) + " GB");
  }
}

// Per-dispatch pricing of one layer (every layer is alike) and the tail, per device step.
std::vector<CostEstimate> price_step(const TransformerConfig& c, const ParallelConfig& par, const DeviceSpec& dev,
                                     const PhysicalParams& p) {
  const int tp = par.strategy == Strategy::kTensorParallel ? par.gpus : 1;
  TransformerConfig one = c;
  one.layers = 1;
  std::vector<CostEstimate> out;
  for (const WorkItem& w :
       transformer_step_work(one, tp, par.strategy == Strategy::kFsdp ? par.gpus : 1, par.tp_scheme)) {
    CostEstimate d = price(w, dev, p, c.dtype, power_limit_effect(dev, par.power_limit_w));
    if (w.kind == "optimizer") d.time_s /= c.grad_accum, d.energy_j /= c.grad_accum;
    out.push_back(d);
  }
  return out;
}

// Layer 0 stands for every layer; startup, per-step fixed cost, the optimizer's host cost and
// exposed communication belong to no dispatch, so a last entry carries them and the breakdown
// sums to the device's totals.
std::vector<CostEstimate> layer_breakdown(const PhysicalPrediction& r, int layers) {
  const std::vector<CostEstimate> priced = per_layer(r.dispatches, r.steps);
  std::vector<CostEstimate> out;
  for (int l = 0; l < layers; ++l) {
    out.push_back(priced.front());
    out.back().layer = l;
    out.back().name = "layer" + std::to_string(l);
  }
  if (priced.size() > 1) out.push_back(priced.back());
  CostEstimate rest{"comm+overhead", "layer", -2, 0, 0, r.time_s, r.device_energy_j, ""};
  for (const CostEstimate& l : out) {
    rest.time_s -= l.time_s;
    rest.energy_j -= l.energy_j;
  }
  out.push_back(rest);
  return out;
}

}  // namespace

PhysicalPrediction predict_transformer(const TransformerConfig& cfg, const ParallelConfig& par, const DeviceSpec& dev,
                                       const PhysicalParams& p) {
  const TransformerConfig c = cfg.resolved();
  check_parallel(c, par);
  check_memory(c, par, dev);
  PhysicalPrediction r;
  r.device = dev.key;
  r.strategy = par.strategy;
  r.tp_scheme = par.tp_scheme;
  r.power_limit = power_limit_effect(dev, par.power_limit_w);
  fill_totals(r, transformer_features(c, par, dev), p);
  r.average_power_w = r.device_energy_j / r.time_s;
  ParallelConfig single{1, Strategy::kBaseline, false, false};
  single.power_limit_w = par.power_limit_w;
  const double t1 = par.gpus == 1 ? r.time_s : time_breakdown(transformer_features(c, single, dev), p).total();
  r.efficiency = t1 / r.time_s / par.gpus;
  r.joules_per_token = r.total_energy_j / c.tokens;
  r.dispatches = price_step(c, par, dev, p);
  r.layers = layer_breakdown(r, c.layers);
  return r;
}

std::vector<std::string> range_warnings(const FittedRange& range, const std::string& device_key,
                                        const TransformerConfig& cfg, const ParallelConfig& par) {
  std::vector<std::string> out;
  if (range.empty()) return out;
  if (std::find(range.gpus.begin(), range.gpus.end(), device_key) == range.gpus.end()) {
    std::string known;
    for (const std::string& g : range.gpus) known += (known.empty() ? "" : ", ") + g;
    out.push_back("GPU " + device_key + " is not among the fitted GPUs (" + known +
                  "): predicted from its hardware-table entry alone");
  }
  const TransformerConfig c = cfg.resolved();
  const auto outside = [&](const char* what, double v, double lo, double hi) {
    if (hi > 0 && (v < lo * 0.999 || v > hi * 1.001)) {
      out.push_back(fmt::format("{} {:.4g} lies outside the fitted range [{:.4g}, {:.4g}]", what, v, lo, hi));
    }
  };
  outside("model parameters", model_parameters(c), range.min_parameters, range.max_parameters);
  outside("tokens per device step", c.batch * c.seq, range.min_tokens_per_step, range.max_tokens_per_step);
  outside("GPU count", par.gpus, range.min_gpus, range.max_gpus);
  const std::string s = strategy_name(par.strategy);
  if (!range.strategies.empty() &&
      std::find(range.strategies.begin(), range.strategies.end(), s) == range.strategies.end()) {
    out.push_back("strategy " + s + " is not among the fitted strategies");
  }
  return out;
}

PhysicalPrediction predict_work(const std::vector<WorkItem>& work, const DeviceSpec& dev, const PhysicalParams& p,
                                const std::string& dtype, double steps, double tokens_per_step) {
  if (work.empty()) invalid("the program has no dispatches to price");
  if (!(steps > 0)) invalid("steps must be positive");
  dtype_bytes(dtype);
  RunFeatures f;
  for (const WorkItem& w : work) add_work(f, w, 1, dev, dtype);
  f.steps = steps;
  device_constants(f, dev, dtype);
  // A program is priced per step: no start-up and no per-step loop cost beyond its dispatches.
  PhysicalParams q = p;
  q.startup_s = 0;
  q.step_overhead_s = 0;
  PhysicalPrediction r;
  r.device = dev.key;
  fill_totals(r, f, q);
  r.efficiency = 1;
  r.power_limit = power_limit_effect(dev, 0);
  r.average_power_w = r.device_energy_j / r.time_s;
  r.joules_per_token = tokens_per_step > 0 ? r.total_energy_j / (tokens_per_step * steps) : 0;
  for (const WorkItem& w : work) r.dispatches.push_back(price(w, dev, q, dtype));
  r.layers = per_layer(r.dispatches, steps);
  return r;
}

}  // namespace meganeura::energy
