#include "meganeura/optim.h"

#include <cmath>
#include <stdexcept>

#include "graph/internal.h"

namespace meganeura {

OptimizerConfig::Kind parse_optimizer(const std::string& s) {
  if (s == "sgd") return OptimizerConfig::Kind::sgd;
  if (s == "adam") return OptimizerConfig::Kind::adam;
  if (s == "adamw") return OptimizerConfig::Kind::adamw;
  throw std::invalid_argument("[optim] unknown optimizer '" + s + "' (expected sgd, adam or adamw)");
}

std::string state_name(const std::string& slot, const std::string& param) { return slot + "." + param; }

void append_update(Graph& g, const std::vector<std::pair<Tensor, Tensor>>& pg, const OptimizerConfig& c) {
  using Kind = OptimizerConfig::Kind;
  if (!(c.lr > 0) || c.weight_decay < 0 || c.clip_norm < 0 || c.accumulation < 1) {
    throw std::invalid_argument("[optim] needs lr > 0, weight_decay >= 0, clip_norm >= 0, accumulation >= 1");
  }
  if (c.kind != Kind::sgd && !(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1 && c.eps > 0)) {
    throw std::invalid_argument("[optim] adam needs 0 <= beta1, beta2 < 1 and eps > 0");
  }
  const graph_internal::PinnedScope pinned(g);  // the update stays f32 under every precision contract
  // An integer counter: exact to 2^31 steps (an f32 one stops counting at 2^24).
  Tensor step = g.state(kStepName, {}, Init{Init::zeros}, DType::i32);
  ScheduleAttrs sched{c.lr, c.warmup_steps, c.total_steps, c.min_lr};
  Tensor lr = lr_schedule(step, sched);
  g.output("lr", lr);

  std::vector<Tensor> grads;
  for (auto& [p, gr] : pg) {
    if (p.shape() != gr.shape()) {
      throw std::invalid_argument("[optim] gradient of '" + g.node(p.id).name + "' has shape " + shape_str(gr.shape()) +
                                  ", parameter " + shape_str(p.shape()));
    }
    grads.push_back(gr);
  }
  if (c.clip_norm > 0 && !grads.empty()) {
    Tensor total = sum(grads[0] * grads[0]);
    for (size_t i = 1; i < grads.size(); ++i) total = total + sum(grads[i] * grads[i]);
    Tensor norm = sqrt(total);
    g.output("grad_norm", norm);
    Tensor coef = clip_coef(norm, c.clip_norm);
    for (auto& gr : grads) gr = gr * coef;
  }

  // Bias corrections 1 - beta^t in double (in f32 they cancel for beta near 1), once per step:
  // every parameter shares them.
  Tensor inv_bc1, rsqrt_bc2;
  if (c.kind != Kind::sgd && !pg.empty()) {
    inv_bc1 = bias_correction(step, c.beta1, -1.0);
    rsqrt_bc2 = bias_correction(step, c.beta2, -0.5);
  }
  for (size_t i = 0; i < pg.size(); ++i) {
    Tensor p = pg[i].first, gr = grads[i];
    const std::string& name = g.node(p.id).name;
    if (c.kind != Kind::adamw && c.weight_decay > 0) gr = gr + p * c.weight_decay;
    Tensor next = p;
    if (c.kind == Kind::sgd) {
      Tensor update = gr;
      if (c.momentum > 0) {
        Tensor buf = g.state(state_name("sgd_momentum", name), p.shape());
        Tensor buf2 = buf * c.momentum + gr;
        g.assign(buf, buf2);
        update = c.nesterov ? gr + buf2 * c.momentum : buf2;
      }
      next = p - update * lr;
    } else {
      Tensor m = g.state(state_name("adam_m", name), p.shape());
      Tensor v = g.state(state_name("adam_v", name), p.shape());
      Tensor m2 = m * c.beta1 + gr * (1 - c.beta1);
      Tensor v2 = v * c.beta2 + (gr * gr) * (1 - c.beta2);
      g.assign(m, m2);
      g.assign(v, v2);
      Tensor denom = sqrt(v2) * rsqrt_bc2 + c.eps;
      Tensor base = p;
      if (c.kind == Kind::adamw && c.weight_decay > 0) base = p - p * (lr * c.weight_decay);
      next = base - (m2 / denom) * (lr * inv_bc1);
    }
    g.assign(p, next);
  }
  g.assign(step, increment(step));
}

}  // namespace meganeura
