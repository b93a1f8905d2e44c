// `meganeura train --workload W`: any of the five workloads as a training task on synthetic
// data: one fixed batch drawn from the seed, which the model fits, so a falling loss shows the
// whole training step (forward, backward, optimizer) working. Evaluation uses the same batch
// (rank 0's, in data-parallel training).
#include <memory>

#include "meganeura/workloads.h"
#include "tasks.h"

namespace meganeura::cli {
namespace {

class WorkloadTask final : public Task {
 public:
  WorkloadTask(std::string id, models::Scale scale, uint64_t seed)
      : id_(std::move(id)), scale_(scale), seed_(seed), shape_graph_(std::make_unique<Graph>()) {
    shape_ = models::build_workload(*shape_graph_, id_, scale_);
  }
  std::string name() const override { return id_; }
  int64_t default_steps() const override { return scale_ == models::Scale::ci ? 20 : 10; }
  OptimizerConfig default_optimizer() const override {
    OptimizerConfig o;
    o.kind = OptimizerConfig::Kind::adamw;
    o.lr = 1e-3;
    o.weight_decay = 0.01;
    o.clip_norm = 1.0;
    o.warmup_steps = 2;
    o.total_steps = default_steps();
    o.min_lr = 1e-4;
    return o;
  }
  Tensor build_loss(Graph& g) const override { return models::build_workload(g, id_, scale_).loss; }
  void initialise(Session& s) const override {
    for (NodeId id : shape_graph_->parameters()) {
      if (auto v = models::special_init(id_, *shape_graph_, id))
        s.set(shape_graph_->node(id).name, std::span<const double>(*v));
    }
  }
  // The batch is part of the workload's shape: each rank draws its own fixed batch (rank 0 the
  // single-process one).
  void feed(Session& s, int64_t, const Shard& shard) const override {
    feed_batch(s, seed_ + uint64_t(shard.rank) * 0x9E3779B97F4A7C15ULL);
  }
  void add_inference(Session& s) override {
    Graph g;
    models::Workload w = models::build_workload(g, id_, scale_);
    g.output("eval_loss", w.loss);
    program_ = s.add(g);
  }
  nlohmann::json evaluate(Session& s) const override {
    feed_batch(s, seed_);
    s.run(program_);
    return {{"eval_loss", s.scalar("eval_loss")}, {"scale", models::scale_name(scale_)}};
  }

 private:
  void feed_batch(Session& s, uint64_t stream) const {
    models::InputValues v = models::synthetic_inputs(shape_, id_, stream);
    for (auto& [name, x] : v.floats) s.set(name, std::span<const double>(x));
    for (auto& [name, x] : v.ints) s.set(name, std::span<const int32_t>(x));
  }
  std::string id_;
  models::Scale scale_;
  uint64_t seed_;
  std::unique_ptr<Graph> shape_graph_;  // inputs and outputs of the workload, for synthetic data
  models::Workload shape_;
  size_t program_ = 0;
};

}  // namespace

std::unique_ptr<Task> make_workload_task(const std::string& id, const std::string& scale, uint64_t seed) {
  return std::make_unique<WorkloadTask>(id, models::parse_scale(scale), seed);
}

}  // namespace meganeura::cli
