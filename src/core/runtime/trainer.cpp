#include <stdexcept>

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
}  // namespace

Graph training_graph(const LossFn& build, const OptimizerConfig& cfg) {
  Graph g;
  auto [params, grads] = forward_and_grads(g, build);
  std::vector<std::pair<Tensor, Tensor>> pg;
  for (size_t i = 0; i < params.size(); ++i) pg.emplace_back(params[i], grads[i]);
  append_update(g, pg, cfg);
  return g;
}

Trainer::Trainer(const LossFn& build, const OptimizerConfig& cfg, const SessionOptions& so)
    : config_(cfg), session_(so) {
  if (cfg.accumulation < 1) throw std::invalid_argument("[train] accumulation must be >= 1");
  if (cfg.accumulation == 1) {
    graph_ = training_graph(build, cfg);
    grad_program_ = apply_program_ = session_.add(graph_);
    return;
  }
  auto [params, grads] = forward_and_grads(graph_, build);
  Graph apply;
  std::vector<std::pair<Tensor, Tensor>> pg;
  for (size_t i = 0; i < params.size(); ++i) {
    const Node& n = graph_.node(params[i].id);
    std::string acc_name = state_name("grad_acc", n.name);
    Tensor acc = graph_.state(acc_name, n.type.shape);
    graph_.assign(acc, acc + grads[i]);
    Tensor p = apply.parameter(n.name, n.type.shape, n.init, n.type.dtype);
    Tensor a = apply.state(acc_name, n.type.shape);
    pg.emplace_back(p, a * (1.0 / cfg.accumulation));
    apply.assign(a, broadcast_to(apply.scalar(0.0), n.type.shape));
  }
  append_update(apply, pg, cfg);
  grad_program_ = session_.add(graph_);
  apply_program_ = session_.add(apply);
}

float Trainer::step() {
  session_.run(grad_program_);
  float loss = session_.scalar("loss");
  if (grad_program_ != apply_program_ && ++micro_ == config_.accumulation) {
    session_.run(apply_program_);
    micro_ = 0;
  }
  return loss;
}

int64_t Trainer::updates() const { return int64_t(session_.get_f64(kStepName).at(0)); }

}  // namespace meganeura
