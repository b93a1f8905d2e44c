#include <cmath>
#include <span>
#include <stdexcept>

#include "distributed/reducer.h"
#include "graph/op_table.h"
#include "meganeura/train.h"

namespace meganeura {

namespace {
// Builds forward + loss output into g; returns parameters and their gradients. `scaled`: the
// gradients of loss * the input kLossScaleName (loss scaling), with their sum as the output
// kGradCheckName.
std::pair<std::vector<Tensor>, std::vector<Tensor>> forward_and_grads(Graph& g, const LossFn& build,
                                                                      bool scaled = false) {
  Tensor loss = build(g);
  if (loss.rank() != 0)
    throw std::invalid_argument("[train] the loss must be a scalar, got " + shape_str(loss.shape()));
  g.output("loss", loss);
  std::vector<Tensor> params;
  for (NodeId id : g.parameters()) params.push_back(g.tensor(id));
  if (params.empty()) throw std::invalid_argument("[train] the model has no parameters");
  if (!scaled) return {params, grad(loss, params)};
  return {params, vjp(loss, g.input(kLossScaleName, {}, loss.dtype()), params)};
}

// The sum of every element of `ts`: finite exactly when they all are (short of an f32 overflow
// of the sum itself, which a skipped update also answers).
Tensor total(const std::vector<Tensor>& ts) {
  Tensor t = sum(ts[0]);
  for (size_t i = 1; i < ts.size(); ++i) t = t + sum(ts[i]);
  return t;
}

// The step as two graphs sharing buffers by name: `grad` (forward and backward) leaves each
// gradient in a buffer that `apply` (the optimizer) reads: an accumulator "grad_acc.<p>" the
// grad program adds to (apply divides it by the accumulation count and zeroes it), or, with
// `outputs`, an output "grad.<p>" written anew each step. Returns apply and the buffer names.
// `scaled`: loss scaling, the gradients (or accumulators) summed into the output kGradCheckName
// and multiplied in apply by the input kLossUnscaleName.
std::pair<Graph, std::vector<std::string>> split_step(Graph& grad, const LossFn& build, const OptimizerConfig& cfg,
                                                      bool outputs, bool scaled = false) {
  auto [params, grads] = forward_and_grads(grad, build, scaled);
  Graph apply;
  std::vector<std::string> buffers;
  std::vector<std::pair<Tensor, Tensor>> pg;
  std::vector<Tensor> written;  // what the grad program leaves for apply
  for (size_t i = 0; i < params.size(); ++i) {
    const Node& n = grad.node(params[i].id);
    Tensor p = apply.parameter(n.name, n.type.shape, n.init, n.type.dtype);
    const std::string name = state_name(outputs ? "grad" : "grad_acc", n.name);
    if (outputs) {
      grad.output(name, grads[i]);
      written.push_back(grads[i]);
      pg.emplace_back(p, apply.input(name, n.type.shape, grads[i].dtype()));
    } else {
      Tensor acc = grad.state(name, n.type.shape);
      Tensor next = acc + grads[i];
      grad.assign(acc, next);
      written.push_back(next);
      Tensor a = apply.state(name, n.type.shape);
      pg.emplace_back(p, a * (1.0 / cfg.accumulation));
      apply.assign(a, broadcast_to(apply.scalar(0.0), n.type.shape));
    }
    buffers.push_back(name);
  }
  if (scaled) {
    grad.output(kGradCheckName, total(written));
    Tensor unscale = apply.input(kLossUnscaleName, {});
    for (auto& [p, g] : pg) g = g * unscale;
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
                 const DataParallelOptions& parallel, const LossScaling& scaling)
    : config_(cfg), scaling_(scaling), session_(so) {
  if (cfg.accumulation < 1) throw std::invalid_argument("[train] accumulation must be >= 1");
  check_backward(so.precision, so.backward);
  if (so.backward == Backward::reduced) {
    if (parallel.comm) {
      throw std::invalid_argument(
          "[train] backward 'reduced' (loss scaling) is not available with data parallel training yet");
    }
    if (!(scaling.init > 0 && std::isfinite(scaling.init)) || scaling.growth_interval < 1)
      throw std::invalid_argument("[train] loss scaling needs a finite init > 0 and growth_interval >= 1");
    scaled_ = true;
    scale_ = scaling.init;
    auto [apply, buffers] = split_step(graph_, build, cfg, cfg.accumulation == 1, true);
    if (cfg.accumulation > 1) accumulators_ = std::move(buffers);
    grad_program_ = session_.add(graph_);
    apply_program_ = session_.add(apply);
    return;
  }
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

float Trainer::scaled_step() {
  const double seed[1] = {scale_};
  session_.set(kLossScaleName, std::span<const double>(seed));
  session_.run(grad_program_);
  const float loss = session_.scalar("loss");
  if (++micro_ < config_.accumulation) return loss;
  micro_ = 0;
  if (std::isfinite(session_.scalar(kGradCheckName))) {
    const double unscale[1] = {1 / scale_};
    session_.set(kLossUnscaleName, std::span<const double>(unscale));
    session_.run(apply_program_);
    if (++finite_in_a_row_ == scaling_.growth_interval) scale_ *= 2, finite_in_a_row_ = 0;
  } else {
    ++skipped_;
    scale_ /= 2;
    finite_in_a_row_ = 0;
    for (const std::string& name : accumulators_) {
      const std::vector<double> zeros(session_.get_f64(name).size(), 0.0);
      session_.set(name, std::span<const double>(zeros));
    }
  }
  return loss;
}

float Trainer::step() {
  if (scaled_) return scaled_step();
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
