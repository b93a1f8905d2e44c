// The two built-in models (mlp, chargpt) as benchmark workloads: the same configurations and
// batch sizes as the `meganeura train` tasks, with one fixed deterministic batch, so the parity
// check and the timing binary feed exactly what the PyTorch reference reads back from a file.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "meganeura/safetensors.h"
#include "meganeura/session.h"
#include "meganeura/train.h"

namespace meganeura::bench {

struct Workload {
  std::string name;
  int64_t batch = 0;  // examples in the fixed batch
  // The model from its inputs (named `prefix` + input name, `rows` examples; 0 = batch) to
  // its logits.
  std::function<Tensor(Graph& g, const std::string& prefix, int64_t rows)> forward;
  // The training loss of those logits against the targets (named `prefix` + input name).
  std::function<Tensor(Graph& g, Tensor logits, const std::string& prefix)> criterion;
  std::map<std::string, io::TensorRecord> inputs;   // forward's inputs -> the fixed batch
  std::map<std::string, io::TensorRecord> targets;  // criterion's inputs -> the fixed batch
  OptimizerConfig optimizer;                        // the training task's optimizer
  nlohmann::json config;                            // model hyper-parameters, for the reference

  // forward then criterion, with the unprefixed input names (what the Trainer builds).
  LossFn loss() const;
  // The optimizer settings a reference needs to repeat the update, as JSON.
  nlohmann::json optimizer_json() const;
  // Sets the batch into `s` under its input names, prefixed with `prefix` ("" or "infer."):
  // the forward's inputs, and the targets too when `with_targets`. With `rows` > 0, only the
  // first `rows` examples of the inputs (the single-example latency program).
  void feed(Session& s, const std::string& prefix = "", bool with_targets = true, int64_t rows = 0) const;
};

// "mlp" or "chargpt"; throws std::invalid_argument naming the unknown model.
Workload make_workload(const std::string& name);

// Reads the `--flag value` pairs of argv into a map, accepting only the flags in `known`
// (with their defaults); throws std::invalid_argument with a one-line message otherwise.
std::map<std::string, std::string> parse_flags(int argc, char** argv, const std::map<std::string, std::string>& known);

// The integer value of flag `key`; throws std::invalid_argument naming the flag otherwise.
int64_t flag_int(const std::map<std::string, std::string>& flags, const std::string& key);

}  // namespace meganeura::bench
