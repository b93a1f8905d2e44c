// Running a workload once (forward, loss, every gradient) and comparing two such runs.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "meganeura/session.h"
#include "meganeura/workloads.h"

namespace meganeura::cli {

struct WorkloadRunOptions {
  std::string workload;
  models::Scale scale = models::Scale::ci;
  Device device = Device::cpu;
  uint64_t seed = 1;
  bool f64 = false;
  std::string weights, inputs;              // read when set
  std::string write_weights, write_inputs;  // written when set
  // q8_0 / q4_0: the forward pass alone, its linear weights held in that block format
  // (quantise_weights); no gradients then.
  DType weights_dtype = DType::f32;
  Precision precision = Precision::strict;  // SessionOptions::precision
  bool forward_only = false;                // outputs and loss, no gradients
  // reduced: the gradients' products read rounded operands too (SessionOptions::backward), the
  // gradients taken with loss scaling: seeded with a scale from 65536 down, halved until every
  // gradient is finite (a skipped step of dynamic loss scaling), and divided by it on the host.
  Backward backward = Backward::f32;
};

struct DumpTensor {
  Shape shape;
  std::vector<float> values;
};
using Dump = std::map<std::string, DumpTensor>;

struct RunOutcome {
  Dump tensors;  // outputs by name, "loss", "grad.<parameter>"
  float loss = 0;
  int64_t parameters = 0;
  uint64_t weight_bytes = 0;  // the parameters as held (blocks where quantised)
  // What the plan says: bytes the products (GEMM, convolution and attention, forward and
  // backward) read, as stored, and the device memory planned (arena and external buffers).
  uint64_t product_read_bytes = 0, planned_bytes = 0;
  double loss_scale = 0;  // backward reduced: the scale the gradients were taken at
  std::string device;
};

// Builds the workload with its gradients (f32 weights), initialises (seeded, or from weights), feeds inputs
// (synthetic, or from a file) and runs once.
RunOutcome run_workload(const WorkloadRunOptions& o);
// Sets the inputs of `w` in `s` from a safetensors file; each must be present with its shape.
void set_inputs_from_file(Session& s, const models::Workload& w, const std::string& path);

void write_dump(const std::string& path, const Dump& d);
Dump read_dump(const std::string& path);

struct GateReport {
  struct Worst {
    double value = 0;
    std::string name;
    bool pass = true;
  };
  Worst output_rel_l2, loss_rel, grad_rel_l2, grad_cosine;
  size_t gradients = 0;
  bool pass = true;
  nlohmann::json to_json() const;
  void print(std::ostream& os) const;
};
// `ours` against `reference`: outputs rel L2 < 1%, loss rel < 1%, every gradient rel L2 < 5% and
// cosine > 0.99. A tensor the reference has but we lack (or the other way) fails the gate.
GateReport compare(const Dump& ours, const Dump& reference);

// Deliberate corruption for negative controls: "flip-grad:<parameter>" (or "flip-grad" for
// the first) negates a gradient, "scale-output:<factor>" scales every forward output.
void apply_negative_control(Dump& d, const std::string& spec);

std::string shell_quote(const std::string& s);

}  // namespace meganeura::cli
