// meganeura profile: a built-in model's training step on a Vulkan device, timed per dispatch
// with timestamp queries and summarised per kernel; optionally a Chrome-trace JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "meganeura/train.h"
#include "meganeura/vulkan.h"
#include "tasks.h"

namespace meganeura::cli {
namespace {

struct ProfileArgs {
  std::string model = "chargpt", device = "vulkan", trace;
  int64_t steps = 3;
  bool json = false;
  ModelOptions sizes;
};

int run_profile(const ProfileArgs& a) {
  auto task = make_task(a.model, 1, a.sizes);
  SessionOptions so = base_session_options();
  select_device(so, a.device);
  if (so.device != Device::vulkan)
    throw std::invalid_argument("profile needs a Vulkan device (--device vulkan or a device name)");
  so.vulkan_profile = true;
  auto t0 = std::chrono::steady_clock::now();
  OptimizerConfig opt = task->default_optimizer();
  opt.accumulation = 1;
  Trainer trainer([&](Graph& g) { return task->build_loss(g); }, opt, so);
  const double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int64_t s = 0; s < a.steps; ++s) {
    task->feed(trainer.session(), s, {});
    trainer.step();
  }
  const Backend& b = trainer.session().backend();
  const VulkanProgramProfile* p = vulkan_profile(b, 0);
  if (!p || p->runs == 0) throw std::runtime_error("the device has no timestamp queries on its compute queue");
  const double runs = double(p->runs), step_ms = p->step_ms / runs;
  struct Row {
    uint64_t count = 0;
    double ms = 0, flops = 0, bytes = 0;
  };
  std::map<std::string, Row> rows;
  for (const auto& l : p->launches) {
    Row& r = rows[l.kernel + ":" + l.op];
    r.count++;
    r.ms += l.ms / runs;
    r.flops += l.flops;
    r.bytes += l.bytes;
  }
  std::vector<std::pair<std::string, Row>> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end(), [](auto& x, auto& y) { return x.second.ms > y.second.ms; });
  nlohmann::json kernels = nlohmann::json::array();
  for (auto& [name, r] : sorted) {
    const double sec = r.ms * 1e-3;
    kernels.push_back({{"kernel", name},
                       {"count", r.count},
                       {"ms", r.ms},
                       {"share", step_ms > 0 ? r.ms / step_ms : 0},
                       {"gflops", sec > 0 ? r.flops / sec * 1e-9 : 0},
                       {"gbps", sec > 0 ? r.bytes / sec * 1e-9 : 0}});
  }
  nlohmann::json out = {{"model", task->name()},
                        {"device", trainer.session().device_name()},
                        {"steps", a.steps},
                        {"step_ms", step_ms},
                        {"dispatches_per_step", p->dispatches},
                        {"barriers_per_step", p->barriers},
                        {"barriers_per_dispatch", p->dispatches ? double(p->barriers) / double(p->dispatches) : 0},
                        {"session_ready_s", compile_s},
                        {"pipelines", vulkan_pipeline_count(b)},
                        {"pipeline_cache", vulkan_cache_status(b)},
                        {"kernels", kernels}};
  if (!a.trace.empty()) {
    // Chrome trace: one complete event per dispatch of the last step, laid end to end.
    nlohmann::json events = nlohmann::json::array();
    double t = 0;
    for (const auto& l : p->launches) {
      const double us = l.ms / runs * 1e3;
      events.push_back({{"name", l.op},
                        {"cat", l.kernel},
                        {"ph", "X"},
                        {"ts", t},
                        {"dur", us},
                        {"pid", 1},
                        {"tid", 1},
                        {"args", {{"dispatch", l.dispatch}, {"flops", l.flops}, {"bytes", l.bytes}}}});
      t += us;
    }
    std::ofstream f(a.trace);
    if (!f) throw std::runtime_error("cannot write " + a.trace);
    f << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  }
  if (a.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("%s on %s: %.2f ms per step, %llu dispatches, %llu barriers, ready in %.3f s\n", task->name().c_str(),
              trainer.session().device_name().c_str(), step_ms, static_cast<unsigned long long>(p->dispatches),
              static_cast<unsigned long long>(p->barriers), compile_s);
  std::printf("%-32s %6s %10s %7s %9s %9s\n", "kernel:op", "count", "ms", "share", "GFLOP/s", "GB/s");
  for (auto& k : kernels) {
    std::printf("%-32s %6llu %10.3f %6.1f%% %9.2f %9.2f\n", k["kernel"].get<std::string>().c_str(),
                static_cast<unsigned long long>(k["count"].get<uint64_t>()), k["ms"].get<double>(),
                100 * k["share"].get<double>(), k["gflops"].get<double>(), k["gbps"].get<double>());
  }
  return 0;
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  CLI::App* c = app.add_subcommand("profile", "time a model's training step per dispatch on a Vulkan device");
  c->add_option("--model", a->model, "mlp | chargpt")->check(CLI::IsMember({"mlp", "chargpt"}));
  c->add_option("--width", a->sizes.width, "model width")->check(CLI::PositiveNumber);
  c->add_option("--layers", a->sizes.layers, "layers")->check(CLI::PositiveNumber);
  c->add_option("--device", a->device, "vulkan or a Vulkan device's index or name");
  c->add_option("--steps", a->steps, "profiled steps (averaged)")->check(CLI::PositiveNumber);
  c->add_option("--trace", a->trace, "write a Chrome-trace JSON (Perfetto opens it)");
  c->add_flag("--json", a->json, "JSON on stdout");
  c->callback([a] { throw CLI::RuntimeError(run_profile(*a)); });
}

}  // namespace meganeura::cli
