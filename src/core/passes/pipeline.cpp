// The pipeline: every rewrite pass in the order optimize() runs it.
#include "passes/registry.h"

namespace meganeura::passes {
namespace {

Graph decompose(const Graph& g, const PassOptions&, PassStats*) { return decompose_to_primitives(g); }
Graph prune(const Graph& g, const PassOptions&, PassStats*) { return remove_dead_nodes(g, nullptr); }
Graph softmax(const Graph& g, const PassOptions&, PassStats* s) { return fuse_softmax(g, s); }
Graph norms(const Graph& g, const PassOptions&, PassStats* s) { return fuse_norms(g, s); }
Graph matmul_sums(const Graph& g, const PassOptions&, PassStats* s) { return fold_batched_matmul_sums(g, s); }
Graph dead_nodes(const Graph& g, const PassOptions&, PassStats* s) { return remove_dead_nodes(g, s); }

}  // namespace

const std::vector<Pass>& pipeline() {
  static const std::vector<Pass> kPipeline = {
      // For a backend without their kernels: first, so that the passes below see primitives.
      {"decompose", &PassOptions::decompose, decompose, false, nullptr},
      {"prune", nullptr, prune, false, nullptr},
      {"softmax", &PassOptions::softmax, softmax, true, &PassStats::softmaxes},
      {"norms", &PassOptions::norms, norms, true, &PassStats::norms},
      {"batched_matmul_sums", &PassOptions::batched_matmul_sums, matmul_sums, true, &PassStats::folded},
      // Pointwise fusion with its epilogues, fused reductions and multi-output merges
      // (PassOptions::matmul_epilogue, strided_reductions, multi_output): last of the fusions.
      {"pointwise", &PassOptions::pointwise, fuse_pointwise, false, &PassStats::fused},
      {"dead_nodes", &PassOptions::dead_nodes, dead_nodes, false, &PassStats::removed},
  };
  return kPipeline;
}

const Pass* find_pass(std::string_view name) {
  for (const Pass& p : pipeline()) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

}  // namespace meganeura::passes

namespace meganeura {

Graph optimize(const Graph& g, const PassOptions& o, PassStats* stats) {
  const Graph* cur = &g;
  Graph out;
  for (const passes::Pass& p : passes::pipeline()) {
    if (p.enabled && !(o.*p.enabled)) continue;
    Graph next = p.run(*cur, o, stats);
    out = p.prune_after ? remove_dead_nodes(next, nullptr) : std::move(next);
    cur = &out;
  }
  return cur == &g ? g : out;
}

}  // namespace meganeura
