#include <stdexcept>

#include "distributed/reducer.h"
#include "graph/op_table.h"
#include "meganeura/train.h"

namespace meganeura {

namespace {
// Builds forward + loss output into g; returns parameters and their gradients.
std::pair<std::vector<Tensor>, std::vector<Tensor>> forward_and_grads(Graph& g, const LossFn& build) {
  Tensor loss = build(g);
  if (loss.rank() != 0)
    throw std::invalid_argument("[train] the loss must be a scalar, got " + shape_str(loss.shape()));
  g.output("loss", loss);
  std::vector<Tensor> params;
  for (NodeId id : g.parameters()) params.push_back(g.tensor(id));
  if (params.empty()) throw std::invalid_argument("[train] the model has no parameters");
  return {params, grad(loss, params)};
}

// The step as two graphs sharing buffers by name: `grad` (forward and backward) leaves each
// gradient in a buffer that `apply` (the optimizer) reads: an accumulator "grad_acc.<p>" the
// grad program adds to (apply divides it by the accumulation count and zeroes it), or, with
// `outputs`, an output "grad.<p>" written anew each step. Returns apply and the buffer names.
std::pair<Graph, std::vector<std::string>> split_step(Graph& grad, const LossFn& build, const OptimizerConfig& cfg,
                                                      bool outputs) {
  auto [params, grads] = forward_and_grads(grad, build);
  Graph apply;
  std::vector<std::string> buffers;
  std::vector<std::pair<Tensor, Tensor>> pg;
  for (size_t i = 0; i < params.size(); ++i) {
    const Node& n = grad.node(params[i].id);
    Tensor p = apply.parameter(n.name, n.type.shape, n.init, n.type.dtype);
    const std::string name = state_name(outputs ? "grad" : "grad_acc", n.name);
    if (outputs) {
      grad.output(name, grads[i]);
      pg.emplace_back(p, apply.input(name, n.type.shape, grads[i].dtype()));
    } else {
      Tensor acc = grad.state(name, n.type.shape);
      grad.assign(acc, acc + grads[i]);
      Tensor a = apply.state(name, n.type.shape);
      pg.emplace_back(p, a * (1.0 / cfg.accumulation));
      apply.assign(a, broadcast_to(apply.scalar(0.0), n.type.shape));
    }
    buffers.push_back(name);
  }
  append_update(apply, pg, cfg);
  return {std::move(apply), std::move(buffers)};
}
}  // namespace

Graph training_graph(const LossFn& build, const OptimizerConfig& cfg) {
  Graph g;
  auto [params, grads] = forward_and_grads(g, build);
  std::vector<std::pair<Tensor, Tensor>> pg;
  for (size_t i = 0; i < params.size(); ++i) pg.emplace_back(params[i], grads[i]);
  append_update(g, pg, cfg);
  return g;
}

Trainer::Trainer(const LossFn& build, const OptimizerConfig& cfg, const SessionOptions& so,
                 const DataParallelOptions& parallel)
    : config_(cfg), session_(so) {
  if (cfg.accumulation < 1) throw std::invalid_argument("[train] accumulation must be >= 1");
  if (parallel.comm) {
    build_data_parallel(build, parallel);
    return;
  }
  if (cfg.accumulation == 1) {
    graph_ = training_graph(build, cfg);
    grad_program_ = apply_program_ = session_.add(graph_);
    return;
  }
  Graph apply = split_step(graph_, build, cfg, false).first;
  grad_program_ = session_.add(graph_);
  apply_program_ = session_.add(apply);
}

Trainer::~Trainer() = default;

void Trainer::build_data_parallel(const LossFn& build, const DataParallelOptions& parallel) {
  auto [apply, gradients] = split_step(graph_, build, config_, config_.accumulation == 1);
  grad_program_ = session_.add(graph_);
  apply_program_ = session_.add(apply);
  const uint64_t graphs = fnv1a(std::to_string(graph_.hash()) + "/" + std::to_string(apply.hash()));
  reducer_ =
      std::make_unique<distributed::GradientReducer>(session_, grad_program_, std::move(gradients), parallel, graphs);
}

float Trainer::step() {
  const bool update = grad_program_ == apply_program_ || ++micro_ == config_.accumulation;
  if (reducer_) {
    const float loss = reducer_->run(update);
    if (update) {
      micro_ = 0;
      session_.run(apply_program_);
      reducer_->updated();
    }
    return loss;
  }
  session_.run(grad_program_);
  float loss = session_.scalar("loss");
  if (grad_program_ != apply_program_ && update) {
    session_.run(apply_program_);
    micro_ = 0;
  }
  return loss;
}

int64_t Trainer::updates() const { return int64_t(session_.get_f64(kStepName).at(0)); }

CommProfile Trainer::comm_profile() const { return reducer_ ? reducer_->profile() : CommProfile{}; }

}  // namespace meganeura
