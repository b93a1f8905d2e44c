// Optimizers as graph programs: the update of every parameter, the optimizer state and the
// learning-rate schedule are nodes, so every backend runs the whole training step.
// Semantics follow PyTorch's SGD, Adam and AdamW (bias correction; AdamW's decoupled decay).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "meganeura/graph.h"

namespace meganeura {

struct OptimizerConfig {
  enum class Kind : uint8_t { sgd, adam, adamw };
  Kind kind = Kind::adamw;
  double lr = 1e-3;
  double momentum = 0;                            // sgd
  bool nesterov = false;                          // sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
  double weight_decay = 0;                        // sgd/adam: L2 added to the gradient; adamw: decoupled
  double clip_norm = 0;                           // > 0: scale gradients so their global L2 norm is at most this
  int64_t warmup_steps = 0;                       // linear warm-up from 0 to lr
  int64_t total_steps = 0;                        // > 0: cosine decay to min_lr at this step
  double min_lr = 0;
  int accumulation = 1;  // micro-steps whose gradients are averaged per update
};
OptimizerConfig::Kind parse_optimizer(const std::string& s);

// Names of the optimizer's state tensors in programs and checkpoints.
constexpr const char* kStepName = "optim.step";
std::string state_name(const std::string& slot, const std::string& param);  // "adam_m.w"

// Appends, for each (parameter, gradient) pair, the clipped and scheduled update and assigns the
// new values to the parameters and optimizer states. Also outputs "lr" and "grad_norm" (when
// clipping). Returns nothing: the updates are assignments of `g`.
void append_update(Graph& g, const std::vector<std::pair<Tensor, Tensor>>& params_and_grads,
                   const OptimizerConfig& cfg);

}  // namespace meganeura
