// Training: a model's forward graph plus autodiff plus the optimizer, planned into programs and
// run by one Session. With accumulation k > 1 there are two programs sharing buffers by name:
// "grad" (forward, backward, grad_acc += g) and "apply" (update from grad_acc / k, then zero).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meganeura/autodiff.h"
#include "meganeura/distributed.h"
#include "meganeura/optim.h"
#include "meganeura/session.h"

namespace meganeura {

// Builds a model's forward pass into `g` and returns its scalar loss.
using LossFn = std::function<Tensor(Graph& g)>;

// The whole training step as one graph (accumulation 1): forward, "loss" output, gradients and
// the optimizer update. What Trainer runs, and what cost models read.
Graph training_graph(const LossFn& build, const OptimizerConfig& optimizer);

namespace distributed {
class GradientReducer;
}

// Data-parallel training (distributed.h). The step is split into a "grad" program (forward,
// backward; the gradients are its outputs, or accumulators with accumulation > 1) and an
// "apply" program (the optimizer). The gradients are summed over the ranks in buckets of about
// `bucket_mb`, each started as soon as the grad program has written it (the dispatch after
// which it is complete comes from the program's order), and divided by the rank count before
// "apply" runs. With accumulation, only the last micro-step of an update reduces.
struct DataParallelOptions {
  Communicator* comm = nullptr;  // null: this process alone
  double bucket_mb = 25;
  // > 0: compare the parameters' hashes across ranks after every k-th update (check_replicas).
  int check_replicas_every = 0;
  // A hash of whatever else every rank must agree on (data seed, steps); compared at start
  // together with the training graphs.
  uint64_t agreement = 0;
};

// Dynamic loss scaling, which a Trainer uses when SessionOptions::backward is reduced (the rule
// of PyTorch's GradScaler): the loss's gradient seed is the scale, so that small gradients stay
// above f16's smallest values; the optimizer reads the gradients divided by it again. An update
// whose gradients are not all finite is skipped (parameters, optimizer state and step counter
// unchanged, the micro-steps' gradients dropped) and halves the scale; `growth_interval` finite
// updates in a row double it. The scale is the Trainer's, not the checkpoint's: a resumed run
// starts again from `init`.
struct LossScaling {
  double init = 65536;
  int growth_interval = 2000;
};
constexpr const char* kLossScaleName = "loss_scale";      // grad program's input: the seed
constexpr const char* kLossUnscaleName = "loss_unscale";  // apply program's input: 1 / scale
constexpr const char* kGradCheckName = "grad_check";      // grad program's output: sum of the gradients

class Trainer {
 public:
  Trainer(const LossFn& build, const OptimizerConfig& optimizer, const SessionOptions& session = {},
          const DataParallelOptions& parallel = {}, const LossScaling& scaling = {});
  ~Trainer();

  // One micro-step on the inputs already set in session(): forward, backward, and the update
  // when `accumulation` micro-steps have been taken. Returns the micro-batch loss (data-parallel:
  // averaged over the ranks, the loss of the global micro-batch).
  float step();
  Session& session() { return session_; }
  const Graph& graph() const { return graph_; }
  int64_t updates() const;  // optimizer updates taken (the optim.step state)
  const OptimizerConfig& config() const { return config_; }
  // Data-parallel: the communication so far (empty when single-process).
  CommProfile comm_profile() const;
  // Loss scaling (backward reduced): the scale the next micro-step seeds with, and the updates
  // skipped for gradients that were not finite. 0 and 0 without loss scaling.
  double loss_scale() const { return scaled_ ? scale_ : 0; }
  int64_t skipped_updates() const { return skipped_; }

 private:
  void build_data_parallel(const LossFn& build, const DataParallelOptions& parallel);
  float scaled_step();
  OptimizerConfig config_;
  LossScaling scaling_;
  bool scaled_ = false;
  double scale_ = 0;
  int finite_in_a_row_ = 0;
  int64_t skipped_ = 0;
  std::vector<std::string> accumulators_;  // zeroed when an accumulated update is skipped
  Graph graph_;
  Session session_;
  size_t grad_program_ = 0, apply_program_ = 0;
  int micro_ = 0;
  std::unique_ptr<distributed::GradientReducer> reducer_;
};

}  // namespace meganeura
