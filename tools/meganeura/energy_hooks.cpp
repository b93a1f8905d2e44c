#include <stdexcept>

#include "commands.h"
#include "graph/op_table.h"
#include "meganeura/passes.h"
#include "meganeura/train.h"
#include "tasks.h"

namespace meganeura::cli {

energy::EnergyCliHooks energy_hooks() {
  energy::EnergyCliHooks h;
  h.models = {"mlp", "chargpt"};
  h.program_work = [](const std::string& model, const std::string& workload) {
    if (!workload.empty())
      throw std::invalid_argument("unknown workload '" + workload + "': no benchmark workloads are built in yet");
    auto task = make_task(model, 1);
    Program p =
        plan(optimize(training_graph([&](Graph& g) { return task->build_loss(g); }, task->default_optimizer())));
    std::vector<energy::WorkItem> items;
    for (size_t i = 0; i < p.dispatches.size(); ++i) {
      const Dispatch& d = p.dispatches[i];
      const OpInfo& info = op_info(d.op);
      std::string kind = info.family == OpFamily::linalg || info.family == OpFamily::conv || d.op == Op::matmul_epilogue
                             ? "matmul"
                         : info.family == OpFamily::optim || d.op == Op::clip_coef ? "optimizer"
                         : info.family == OpFamily::reduce                         ? "reduce"
                                                                                   : "elementwise";
      items.push_back(energy::WorkItem{std::string(info.name) + "_" + std::to_string(i), kind, d.flops, d.bytes, -1});
    }
    return items;
  };
  // Token models feed integer ids: their count per step is the tokens of one step.
  h.tokens_per_step = [](const std::string& model) {
    auto task = make_task(model, 1);
    Program p = plan(training_graph([&](Graph& g) { return task->build_loss(g); }, task->default_optimizer()));
    const ExternalBuffer* ids = p.external("ids");
    return ids && ids->type.dtype == DType::i32 ? double(ids->type.numel()) : 0.0;
  };
  return h;
}

}  // namespace meganeura::cli
