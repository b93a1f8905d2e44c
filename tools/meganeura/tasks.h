// The built-in training tasks behind `meganeura train|infer`: a model, its data, how a batch is
// fed for a given step (a pure function of the seed and step, so a resumed run sees the same
// batches), and how a trained model is evaluated.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "meganeura/checkpoint.h"
#include "meganeura/optim.h"
#include "meganeura/session.h"
#include "text/sampling.h"

namespace meganeura::cli {

// The part of each global batch this process trains on: of a global batch of `ranks` times the
// per-process batch, drawn from the seed and step alone, the rows of rank `rank`. With one rank
// it is the whole batch, so two ranks of batch B see exactly the examples of one process of
// batch 2B.
struct Shard {
  int rank = 0;
  int ranks = 1;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual int64_t default_steps() const = 0;
  virtual OptimizerConfig default_optimizer() const = 0;
  // Training graph: inputs and the scalar loss.
  virtual Tensor build_loss(Graph& g) const = 0;
  virtual void feed(Session& s, int64_t step, const Shard& shard) const = 0;
  // Initial values beyond the seeded Init kinds (after the session is created, before resuming).
  virtual void initialise(Session&) const {}
  // Adds the inference-only programs (forward graphs, no loss or optimizer) to `s`; they share
  // its parameters by name. Then evaluate() runs them.
  virtual void add_inference(Session& s) = 0;
  // How `infer` loads a training checkpoint into that session (checkpoint.h).
  virtual LoadOptions inference_load_options() const { return {.parameters_only = true}; }
  virtual nlohmann::json evaluate(Session& s) const = 0;
  // Hash of the model's forward graph, recorded in checkpoints: of reference_loss(), the loss
  // at the model's default batch, so that a checkpoint resumes at any batch and rank count.
  uint64_t model_hash() const;

 protected:
  virtual Tensor reference_loss(Graph& g) const { return build_loss(g); }
};

// Size overrides from the command line; 0 keeps the model's default.
struct ModelOptions {
  int64_t width = 0;  // mlp hidden width, chargpt model dimension
  int64_t layers = 0;
  int64_t heads = 0;  // chargpt
  int64_t batch = 0;  // examples per process (mlp, chargpt)
  // Text generation after evaluation (chargpt): the prompt, how the next token is drawn and
  // when generation stops.
  std::string prompt = "The river";
  text::SamplingOptions sampling{.temperature = 0.7f};
  text::StopCriteria stop{.max_new_tokens = 160};
  // Inference only (chargpt): the matrices in a block format, q8_0 or q4_0 (models.h,
  // CharGptConfig::weights); the other models refuse anything but f32.
  DType weights = DType::f32;
};

std::unique_ptr<Task> make_task(const std::string& model, uint64_t seed, const ModelOptions& options = {});
// One of the matched workloads (smollm2, smolvla, unet, resnet50, whisper) at scale full | ci.
std::unique_ptr<Task> make_workload_task(const std::string& id, const std::string& scale, uint64_t seed);

}  // namespace meganeura::cli
