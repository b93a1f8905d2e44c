// Graphs shared by the planner tests.
#pragma once

#include "meganeura/autodiff.h"
#include "meganeura/models.h"
#include "meganeura/optim.h"
#include "meganeura/program.h"
#include "meganeura/workloads.h"

namespace meganeura {

// One training step of a transformer: the chargpt block (RMSNorm, rotary grouped-query
// attention, SwiGLU) with loss, backward and AdamW.
inline Graph transformer_step(int64_t layers) {
  Graph g;
  models::CharGptConfig c;
  c.vocab = 48;
  c.layers = layers;
  Tensor ids = g.input("ids", {4, c.seq}, DType::i32);
  Tensor targets = g.input("targets", {4 * c.seq}, DType::i32);
  Tensor loss = cross_entropy(reshape(models::chargpt(g, ids, c), {4 * c.seq, c.vocab}), targets);
  g.output("loss", loss);
  std::vector<Tensor> params;
  for (NodeId id : g.parameters()) params.push_back(g.tensor(id));
  auto grads = grad(loss, params);
  std::vector<std::pair<Tensor, Tensor>> pg;
  for (size_t i = 0; i < params.size(); ++i) pg.emplace_back(params[i], grads[i]);
  OptimizerConfig o;
  o.clip_norm = 1;
  append_update(g, pg, o);
  return g;
}

// Workload `id` at CI scale, its loss and every parameter's gradient ("grad.<name>") as
// outputs: forward and backward without an optimizer.
inline void workload_with_gradients(Graph& g, const char* id) {
  models::Workload w = models::build_workload(g, id, models::Scale::ci);
  g.output("loss", w.loss);
  std::vector<Tensor> ps;
  for (NodeId p : g.parameters()) ps.push_back(g.tensor(p));
  auto gs = grad(w.loss, ps);
  for (size_t i = 0; i < ps.size(); ++i) g.output("grad." + g.node(ps[i].id).name, gs[i]);
}

}  // namespace meganeura
