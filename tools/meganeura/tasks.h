// The built-in training tasks behind `meganeura train|infer`: a model, its data, how a batch is
// fed for a given step (a pure function of the seed and step, so a resumed run sees the same
// batches), and how a trained model is evaluated.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "meganeura/optim.h"
#include "meganeura/session.h"

namespace meganeura::cli {

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual int64_t default_steps() const = 0;
  virtual OptimizerConfig default_optimizer() const = 0;
  // Training graph: inputs and the scalar loss.
  virtual Tensor build_loss(Graph& g) const = 0;
  virtual void feed(Session& s, int64_t step) const = 0;
  // Initial values beyond the seeded Init kinds (after the session is created, before resuming).
  virtual void initialise(Session&) const {}
  // Adds the inference-only programs (forward graphs, no loss or optimizer) to `s`; they share
  // its parameters by name. Then evaluate() runs them.
  virtual void add_inference(Session& s) = 0;
  virtual nlohmann::json evaluate(Session& s) const = 0;
  // Hash of the model's forward graph, recorded in checkpoints.
  uint64_t model_hash() const;
};

// Size overrides from the command line; 0 keeps the model's default.
struct ModelOptions {
  int64_t width = 0;  // mlp hidden width, chargpt model dimension
  int64_t layers = 0;
  int64_t heads = 0;  // chargpt
};

std::unique_ptr<Task> make_task(const std::string& model, uint64_t seed, const ModelOptions& options = {});
// One of the matched workloads (smollm2, smolvla, unet, resnet50, whisper) at scale full | ci.
std::unique_ptr<Task> make_workload_task(const std::string& id, const std::string& scale, uint64_t seed);

}  // namespace meganeura::cli
