// Timing server for one built-in model: builds the Trainer (the whole training step as one
// program), a forward+loss+backward program and an inference program in one session, then
// answers commands on stdin so that a driver can alternate between it and another system
// running in its own process:
//   "step N"  - N training steps (forward, loss, backward, AdamW update), Trainer::step
//   "train N" - N forward+loss+backward runs without the update
//   "infer N" - N forward passes of the inference program, logits read back
//   "latency N" - the same for a single example (the first of the batch)
//   "quit"
// Each command answers one JSON line {"phase", "seconds": [per-run wall times], "loss"}. The
// first line is {"ready": true, ...} with the compile time and the session's device.
#include <chrono>
#include <iostream>
#include <sstream>

#include "workloads.h"

namespace mb = meganeura::bench;
using namespace meganeura;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void serve(const std::map<std::string, std::string>& flags) {
  const mb::Workload w = mb::make_workload(flags.at("model"));
  SessionOptions so;
  so.seed = uint64_t(mb::flag_int(flags, "seed"));
  so.threads = int(mb::flag_int(flags, "threads"));

  const Clock::time_point t0 = Clock::now();
  Trainer trainer(w.loss(), w.optimizer, so);
  const double compile_step_s = seconds_since(t0);
  Session& s = trainer.session();

  Graph fb;
  Tensor loss = w.loss()(fb);
  std::vector<Tensor> params;
  for (NodeId id : fb.parameters()) params.push_back(fb.tensor(id));
  const std::vector<Tensor> grads = grad(loss, params);
  fb.output("fb.loss", loss);
  for (size_t i = 0; i < params.size(); ++i) fb.output("fb.grad." + fb.node(params[i].id).name, grads[i]);
  const size_t fb_program = s.add(fb);

  Graph inf;
  inf.output("infer.logits", w.forward(inf, "infer.", 0));
  const size_t infer_program = s.add(inf);
  Graph one;
  one.output("latency.logits", w.forward(one, "latency.", 1));
  const size_t latency_program = s.add(one);

  w.feed(s);
  w.feed(s, "infer.", false);
  w.feed(s, "latency.", false, 1);
  s.initialise();  // initial values are drawn on first use: not inside the first timed sample
  int64_t parameter_count = 0;
  for (const Tensor& p : params) parameter_count += numel(p.shape());
  std::cout << nlohmann::json{{"ready", true},
                              {"model", w.name},
                              {"compile_step_s", compile_step_s},
                              {"device", s.device_name()},
                              {"parameters", parameter_count},
                              {"optimizer", w.optimizer_json()}}
                   .dump()
            << std::endl;

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string phase;
    int64_t n = 0;
    in >> phase;
    if (phase == "quit") return;
    if (!(in >> n) || n < 1 || (phase != "step" && phase != "train" && phase != "infer" && phase != "latency")) {
      throw std::invalid_argument("[bench] bad command '" + line + "' (expected step|train|infer|latency N, or quit)");
    }
    std::vector<double> samples;
    double last_loss = 0;
    for (int64_t i = 0; i < n; ++i) {
      const Clock::time_point t = Clock::now();
      if (phase == "step") {
        last_loss = trainer.step();
      } else if (phase == "train") {
        s.run(fb_program);
        last_loss = s.scalar("fb.loss");
      } else {
        const bool one_example = phase == "latency";
        s.run(one_example ? latency_program : infer_program);
        if (s.get(one_example ? "latency.logits" : "infer.logits").empty()) {
          throw std::runtime_error("[bench] the inference program produced no logits");
        }
      }
      samples.push_back(seconds_since(t));
    }
    nlohmann::json reply{{"phase", phase}, {"seconds", samples}};
    if (phase == "step" || phase == "train") reply["loss"] = last_loss;
    std::cout << reply.dump() << std::endl;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    serve(mb::parse_flags(argc, argv, {{"model", "mlp"}, {"seed", "1"}, {"threads", "0"}}));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_core_step: " << e.what() << "\n";
    return 1;
  }
}
