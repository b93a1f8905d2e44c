#include "energy/physical_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace meganeura::energy {
namespace {

[[noreturn]] void invalid(const std::string& what) {
  throw std::invalid_argument("[energy] " + what);
}

struct LayerShape {
  double tokens;   // B * S
  double d, f, s, heads, act;  // act: bytes per activation element
};

void push(std::vector<WorkItem>& out, int layer, const std::string& op, const char* kind,
          double flops, double bytes) {
  const std::string prefix = layer >= 0 ? "layer" + std::to_string(layer) + "." : "";
  out.push_back({prefix + op, kind, flops, bytes, layer});
}

// Forward and backward dispatches of one encoder layer. Backward of a matmul is two matmuls
// (input and weight gradients); backward of an elementwise op reads twice what it wrote.
void layer_work(std::vector<WorkItem>& out, int layer, const LayerShape& x, int tp) {
  const double t = x.tokens, d = x.d, f = x.f / tp, h = x.heads / tp, a = x.act;
  const double dq = d / tp;  // this device's share of the attention width
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

double layer_params(const TransformerConfig& c, int tp) {
  const double d = c.hidden, f = c.ff;
  return (4 * d * d + 2 * d * f) / tp + (9 * d + f);  // weights split, biases and norms kept
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
    invalid("hidden size " + std::to_string(c.hidden) + " is not divisible by " +
            std::to_string(c.heads) + " heads");
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

PhysicalParams PhysicalParams::from_table(const HardwareTable& table) {
  const ModelDefaults& m = table.model();
  PhysicalParams p;
  p.compute_efficiency = m.compute_efficiency;
  p.memory_efficiency = m.memory_efficiency;
  p.link_efficiency = m.link_efficiency;
  p.dispatch_overhead_s = m.dispatch_overhead_us * 1e-6;
  p.step_overhead_s = m.step_overhead_ms * 1e-3;
  p.comm_overlap = m.comm_overlap;
  p.link_latency_s = m.link_latency_us * 1e-6;
  p.busy_fraction = m.busy_fraction;
  p.idle_scale = m.idle_scale;
  p.dynamic_scale = m.dynamic_scale;
  p.interval_ln = m.interval_ln;
  p.host_power_w = table.host().power_w;
  return p;
}

ModelDefaults PhysicalParams::to_model_defaults() const {
  ModelDefaults m;
  m.compute_efficiency = compute_efficiency;
  m.memory_efficiency = memory_efficiency;
  m.link_efficiency = link_efficiency;
  m.dispatch_overhead_us = dispatch_overhead_s * 1e6;
  m.step_overhead_ms = step_overhead_s * 1e3;
  m.comm_overlap = comm_overlap;
  m.link_latency_us = link_latency_s * 1e6;
  m.busy_fraction = busy_fraction;
  m.idle_scale = idle_scale;
  m.dynamic_scale = dynamic_scale;
  m.interval_ln = interval_ln;
  return m;
}

std::vector<WorkItem> transformer_step_work(const TransformerConfig& cfg, int tp,
                                            int optimizer_shards) {
  const TransformerConfig c = cfg.resolved();
  const LayerShape shape{c.batch * c.seq, double(c.hidden), double(c.ff), c.seq, double(c.heads),
                         dtype_bytes(c.dtype)};
  std::vector<WorkItem> out;
  const double t = shape.tokens, d = c.hidden;
  if (c.vocab > 0) {
    push(out, -1, "embedding.fwd", "gather", t * d, (t * d * 2 + t) * shape.act);
    push(out, -1, "embedding.bwd", "scatter", t * d, t * d * 3 * shape.act);
  }
  for (int l = 0; l < c.layers; ++l) {
    layer_work(out, l, shape, tp);
    // Adam on fp32 master weights: read weight, grad, two moments; write three of them.
    const double p = layer_params(c, tp) / optimizer_shards;
    push(out, l, "adam", "optimizer", 12 * p, 28 * p);
  }
  if (c.vocab > 0) {
    const double p = double(c.vocab) * d / optimizer_shards;
    push(out, -1, "embedding.adam", "optimizer", 12 * p, 28 * p);
  }
  return out;
}

namespace {

// Per-dispatch roofline: a dispatch cannot finish faster than its launch overhead, its
// arithmetic at the achievable peak, or its traffic at the achievable bandwidth.
CostEstimate price(const WorkItem& w, const DeviceSpec& dev, const PhysicalParams& p,
                   const std::string& dtype) {
  // Optimizer and elementwise arithmetic runs on the fp32 vector units, not tensor cores.
  const bool vector = w.kind != "matmul" && w.kind != "attention";
  const std::string rate_dtype = vector ? "fp32" : dtype;
  const double peak = dev.peak_flops(dev.peak_tflops.count(rate_dtype) ? rate_dtype : dtype);
  const double t_compute = w.flops / (peak * p.compute_efficiency);
  const double t_memory = w.bytes / (dev.memory_bandwidth_gbs * 1e9 * p.memory_efficiency);
  CostEstimate e{w.name, w.kind, w.layer, w.flops, w.bytes, 0, 0, ""};
  e.time_s = std::max({t_compute, t_memory, p.dispatch_overhead_s});
  e.bound = e.time_s == p.dispatch_overhead_s ? "launch" : t_compute >= t_memory ? "compute" : "memory";
  e.energy_j = (p.idle_scale * dev.idle_w + p.busy_fraction * (dev.max_w - dev.idle_w)) * e.time_s +
               p.dynamic_scale * (dev.joules_per_flop(dtype) * w.flops + dev.joules_per_byte() * w.bytes);
  return e;
}

struct StepCost {
  double compute_s = 0, flops = 0, bytes = 0;
  std::vector<CostEstimate> dispatches;
};

StepCost price_all(const std::vector<WorkItem>& work, const DeviceSpec& dev,
                   const PhysicalParams& p, const std::string& dtype) {
  StepCost s;
  for (const WorkItem& w : work) {
    if (!(w.flops >= 0) || !(w.bytes >= 0) || !std::isfinite(w.flops) || !std::isfinite(w.bytes)) {
      invalid("work item '" + w.name + "' has negative or non-finite flops/bytes");
    }
    s.dispatches.push_back(price(w, dev, p, dtype));
    s.compute_s += s.dispatches.back().time_s;
    s.flops += w.flops;
    s.bytes += w.bytes;
  }
  return s;
}

// Ring collectives move 2(N-1)/N (all-reduce) or (N-1)/N (gather, scatter) of the buffer.
double collective_s(double bytes, double fraction, double bandwidth, const PhysicalParams& p) {
  return fraction * bytes / (bandwidth * p.link_efficiency) + p.link_latency_s;
}

void fill_energy(PhysicalPrediction& r, const DeviceSpec& dev, const PhysicalParams& p,
                 const std::string& dtype, double flops_per_device, double bytes_per_device,
                 double busy_s) {
  const int nodes = (r.gpus + 7) / 8;
  r.idle_term_j = r.gpus * dev.idle_w * r.time_s;
  r.busy_term_j = r.gpus * (dev.max_w - dev.idle_w) * busy_s;
  r.dynamic_term_j = r.gpus * (dev.joules_per_flop(dtype) * flops_per_device +
                               dev.joules_per_byte() * bytes_per_device);
  r.host_seconds = nodes * r.time_s;
  r.device_energy_j = (p.idle_scale * r.idle_term_j + p.busy_fraction * r.busy_term_j +
                       p.dynamic_scale * r.dynamic_term_j) / r.gpus;
  r.host_energy_j = p.host_power_w * r.host_seconds;
  r.total_energy_j = r.device_energy_j * r.gpus + r.host_energy_j;
  r.kwh = r.total_energy_j / 3.6e6;
  r.kwh_low = r.kwh * std::exp(-p.interval_ln);
  r.kwh_high = r.kwh * std::exp(p.interval_ln);
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

// One device step of a transformer. Every layer does the same work, so one layer is priced
// and counted `layers` times: `dispatches` holds layer 0 and the tail, the totals cover all.
struct TransformerStep {
  StepCost cost;        // totals over all layers, optimizer spread over grad_accum
  double comm_s = 0;    // exposed communication
  double steps = 0;     // device steps over the run
  double time_s = 0;    // whole run
};

TransformerStep transformer_step(const TransformerConfig& c, const ParallelConfig& par,
                                 const DeviceSpec& dev, const PhysicalParams& p) {
  const int n = par.gpus;
  const bool tp = par.strategy == Strategy::kTensorParallel;
  const bool sharded_optimizer = par.strategy == Strategy::kFsdp || tp;
  TransformerConfig one = c;
  one.layers = 1;
  TransformerStep t;
  t.cost = price_all(transformer_step_work(one, tp ? n : 1, sharded_optimizer ? n : 1), dev, p, c.dtype);
  t.cost.compute_s = t.cost.flops = t.cost.bytes = 0;
  for (CostEstimate& d : t.cost.dispatches) {
    // The optimizer runs once per grad_accum micro-steps: spread it over them.
    const double share = d.kind == "optimizer" ? 1.0 / c.grad_accum : 1.0;
    d.time_s *= share;
    d.energy_j *= share;
    const double count = d.layer >= 0 ? c.layers : 1;
    t.cost.compute_s += d.time_s * count;
    t.cost.flops += d.flops * share * count;
    t.cost.bytes += d.bytes * share * count;
  }
  const int data_ranks = tp ? 1 : n;
  t.steps = c.tokens / (c.batch * c.seq * data_ranks);
  const double bw = (par.over_pcie ? dev.pcie_gbs : dev.link_gbs) * 1e9;
  const double act = dtype_bytes(c.dtype);
  const double params = c.layers * layer_params(c, 1) + double(c.vocab) * c.hidden;
  if (n > 1) {
    const double f = double(n - 1) / n;
    switch (par.strategy) {
      case Strategy::kBaseline:
        invalid("--gpus " + std::to_string(n) + " needs a strategy (dp, fsdp or tp)");
      case Strategy::kDataParallel:
        // Gradients (fp32) all-reduced once per optimizer step, partly behind backward.
        t.comm_s = collective_s(params * 4, 2 * f, bw, p) / c.grad_accum * (1 - p.comm_overlap);
        break;
      case Strategy::kFsdp:
        // Parameters gathered for forward and again for backward, gradients reduce-scattered.
        t.comm_s = (2 * collective_s(params * act, f, bw, p) + collective_s(params * 4, f, bw, p)) *
                   (1 - p.comm_overlap);
        break;
      case Strategy::kTensorParallel:
        // Two all-reduces of the layer activations forward and two backward, on the critical path.
        t.comm_s = c.layers * 4 * collective_s(c.batch * c.seq * c.hidden * act, 2 * f, bw, p);
        break;
    }
  }
  t.time_s = t.steps * (t.cost.compute_s + t.comm_s + p.step_overhead_s);
  return t;
}

}  // namespace

PhysicalPrediction predict_transformer(const TransformerConfig& cfg, const ParallelConfig& par,
                                       const DeviceSpec& dev, const PhysicalParams& p) {
  const TransformerConfig c = cfg.resolved();
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
  if (par.check_feasible && par.strategy == Strategy::kTensorParallel &&
      (c.heads % par.gpus != 0 || c.ff % par.gpus != 0)) {
    invalid("tensor parallel over " + std::to_string(par.gpus) + " GPUs needs heads (" +
            std::to_string(c.heads) + ") and ff (" + std::to_string(c.ff) + ") divisible by it");
  }
  // Memory: fp32 master weights, gradients and two Adam moments (16 B/param), sharded by
  // FSDP and TP, plus the stored activations of one micro-batch.
  const double params = c.layers * layer_params(c, 1) + double(c.vocab) * c.hidden;
  const int state_shards = par.strategy == Strategy::kFsdp || par.strategy == Strategy::kTensorParallel ? par.gpus : 1;
  const double act_tp = par.strategy == Strategy::kTensorParallel ? par.gpus : 1;
  const double activations = c.layers * c.batch * c.seq *
                             (34.0 * c.hidden + 5.0 * c.heads * c.seq) / act_tp *
                             dtype_bytes(c.dtype) / 2;
  const double need_gb = (16 * params / state_shards + activations) / 1e9;
  if (par.check_feasible && dev.memory_gb > 0 && need_gb > dev.memory_gb) {
    invalid("configuration needs about " + std::to_string(int(need_gb + 0.5)) + " GB per device; " +
            dev.key + " has " + std::to_string(int(dev.memory_gb)) + " GB");
  }

  PhysicalPrediction r;
  r.device = dev.key;
  r.gpus = par.gpus;
  r.strategy = par.strategy;
  TransformerStep step = transformer_step(c, par, dev, p);
  r.time_s = step.time_s;
  r.steps = step.steps;
  r.comm_time_s = step.comm_s;
  r.step_time_s = r.time_s / r.steps;
  const double t1 = par.gpus == 1 ? r.time_s
                                  : transformer_step(c, ParallelConfig{1, Strategy::kBaseline, false, false},
                                                     dev, p).time_s;
  r.efficiency = t1 / r.time_s / par.gpus;
  const double busy_s = r.time_s - r.steps * p.step_overhead_s;
  fill_energy(r, dev, p, c.dtype, step.cost.flops * r.steps, step.cost.bytes * r.steps, busy_s);
  r.joules_per_token = r.total_energy_j / c.tokens;
  // Layer 0 stands for every layer; exposed communication and per-step overhead belong to no
  // dispatch, so a last entry carries them and the breakdown sums to the device's totals.
  const std::vector<CostEstimate> priced = per_layer(step.cost.dispatches, r.steps);
  for (int l = 0; l < c.layers; ++l) {
    r.layers.push_back(priced.front());
    r.layers.back().layer = l;
    r.layers.back().name = "layer" + std::to_string(l);
  }
  if (priced.size() > 1) r.layers.push_back(priced.back());
  CostEstimate rest{"comm+overhead", "layer", -2, 0, 0, r.time_s, r.device_energy_j, ""};
  for (const CostEstimate& l : r.layers) {
    rest.time_s -= l.time_s;
    rest.energy_j -= l.energy_j;
  }
  r.layers.push_back(rest);
  r.dispatches = std::move(step.cost.dispatches);
  return r;
}

PhysicalPrediction predict_work(const std::vector<WorkItem>& work, const DeviceSpec& dev,
                                const PhysicalParams& p, const std::string& dtype, double steps,
                                double tokens_per_step) {
  if (work.empty()) invalid("the program has no dispatches to price");
  if (!(steps > 0)) invalid("steps must be positive");
  dtype_bytes(dtype);
  PhysicalPrediction r;
  r.device = dev.key;
  StepCost step = price_all(work, dev, p, dtype);
  r.steps = steps;
  r.step_time_s = step.compute_s;
  r.time_s = steps * step.compute_s;
  r.efficiency = 1;
  fill_energy(r, dev, p, dtype, step.flops * steps, step.bytes * steps, r.time_s);
  r.joules_per_token = tokens_per_step > 0 ? r.total_energy_j / (tokens_per_step * steps) : 0;
  r.layers = per_layer(step.dispatches, steps);
  r.dispatches = std::move(step.dispatches);
  return r;
}

}  // namespace meganeura::energy
