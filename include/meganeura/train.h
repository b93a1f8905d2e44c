// Training: a model's forward graph plus autodiff plus the optimizer, planned into programs and
// run by one Session. With accumulation k > 1 there are two programs sharing buffers by name:
// "grad" (forward, backward, grad_acc += g) and "apply" (update from grad_acc / k, then zero).
#pragma once

#include <functional>
#include <memory>

#include "meganeura/autodiff.h"
#include "meganeura/optim.h"
#include "meganeura/session.h"

namespace meganeura {

// Builds a model's forward pass into `g` and returns its scalar loss.
using LossFn = std::function<Tensor(Graph& g)>;

// The whole training step as one graph (accumulation 1): forward, "loss" output, gradients and
// the optimizer update. What Trainer runs, and what cost models read.
Graph training_graph(const LossFn& build, const OptimizerConfig& optimizer);

class Trainer {
 public:
  Trainer(const LossFn& build, const OptimizerConfig& optimizer, const SessionOptions& session = {});

  // One micro-step on the inputs already set in session(): forward, backward, and the update
  // when `accumulation` micro-steps have been taken. Returns the micro-batch loss.
  float step();
  Session& session() { return session_; }
  const Graph& graph() const { return graph_; }
  int64_t updates() const;  // optimizer updates taken (the optim.step state)
  const OptimizerConfig& config() const { return config_; }

 private:
  OptimizerConfig config_;
  Graph graph_;
  Session session_;
  size_t grad_program_ = 0, apply_program_ = 0;
  int micro_ = 0;
};

}  // namespace meganeura
