// meganeura profile: a built-in model's training step, or a Llama model's decode step, on a
// Vulkan device, timed per dispatch with timestamp queries and summarised per kernel with the
// FLOP, bytes and weight bytes each reads; optionally a Chrome-trace JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "meganeura/generate.h"
#include "meganeura/llama.h"
#include "meganeura/passes.h"
#include "meganeura/train.h"
#include "meganeura/vulkan.h"
#include "tasks.h"
#include "text/generation.h"

namespace meganeura::cli {
namespace {

struct ProfileArgs {
  std::string model = "chargpt", device = "vulkan", trace;
  std::string config, weights_dtype = "f32";  // a Llama model's decode step instead
  std::string precision = "strict";
  int64_t steps = 3, max_context = 256;
  bool json = false;
  ModelOptions sizes;
};

// What was profiled: the program's per-launch timings and what the report names.
struct Profiled {
  std::string model, device;
  const VulkanProgramProfile* profile = nullptr;
  double ready_s = 0;
  size_t pipelines = 0;
  std::string cache;
};

// The training step of a built-in model, `steps` times.
Profiled profile_training(const ProfileArgs& a, const SessionOptions& so, std::unique_ptr<Trainer>& keep) {
  auto task = make_task(a.model, 1, a.sizes);
  auto t0 = std::chrono::steady_clock::now();
  OptimizerConfig opt = task->default_optimizer();
  opt.accumulation = 1;
  keep = std::make_unique<Trainer>([&](Graph& g) { return task->build_loss(g); }, opt, so);
  const double ready_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int64_t s = 0; s < a.steps; ++s) {
    task->feed(keep->session(), s, {});
    keep->step();
  }
  const Backend& b = keep->session().backend();
  return {task->name(), keep->session().device_name(), vulkan_profile(b, 0),
          ready_s,      vulkan_pipeline_count(b),      vulkan_cache_status(b)};
}

// A Llama model's decode step (random weights, in the format asked for), `steps` tokens after a
// 16-token prompt: what a token costs, each dispatch with the weight bytes it reads.
Profiled profile_decode(const ProfileArgs& a, const SessionOptions& so, std::unique_ptr<Generator>& keep) {
  auto t0 = std::chrono::steady_clock::now();
  const models::LlamaConfig c = models::read_llama_config(a.config);
  keep = std::make_unique<Generator>(c, GeneratorOptions{.max_context = a.max_context,
                                                         .prefill_chunk = 16,
                                                         .weights = text::weights_dtype(a.weights_dtype, {}),
                                                         .session = so});
  keep->initialise_weights();
  const double ready_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (16 + a.steps > keep->max_context()) {
    throw std::invalid_argument("--steps " + std::to_string(a.steps) + " after a 16-token prompt pass --max-context " +
                                std::to_string(keep->max_context()));
  }
  std::vector<int32_t> ids(16);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919) % uint64_t(c.vocab_size));
  std::vector<int32_t> next = keep->feed_greedy(ids);
  for (int64_t s = 0; s < a.steps; ++s) next = keep->feed_greedy(next);
  size_t decode = 0;
  for (const auto& [tokens, index] : keep->programs())
    if (tokens == 1) decode = index;
  const Backend& b = keep->session().backend();
  return {"llama decode (" + a.weights_dtype + " weights)",
          keep->session().device_name(),
          vulkan_profile(b, decode),
          ready_s,
          vulkan_pipeline_count(b),
          vulkan_cache_status(b)};
}

int run_profile(const ProfileArgs& a) {
  SessionOptions so = base_session_options();
  select_device(so, a.device);
  if (so.device != Device::vulkan)
    throw std::invalid_argument("profile needs a Vulkan device (--device vulkan or a device name)");
  so.vulkan_profile = true;
  so.precision = parse_precision(a.precision);
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<Generator> generator;
  const Profiled pr = a.config.empty() ? profile_training(a, so, trainer) : profile_decode(a, so, generator);
  const VulkanProgramProfile* p = pr.profile;
  if (!p || p->runs == 0) throw std::runtime_error("the device has no timestamp queries on its compute queue");
  const double runs = double(p->runs), step_ms = p->step_ms / runs;
  struct Row {
    uint64_t count = 0;
    double ms = 0, flops = 0, bytes = 0, weight_bytes = 0;
  };
  std::map<std::string, Row> rows;
  double weight_bytes = 0;
  for (const auto& l : p->launches) {
    Row& r = rows[l.kernel + ":" + l.op + (l.operands == "f32" ? "" : "@" + l.operands)];
    r.count++;
    r.ms += l.ms / runs;
    r.flops += l.flops;
    r.bytes += l.bytes;
    r.weight_bytes += double(l.weight_bytes);
    weight_bytes += double(l.weight_bytes);
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
                       {"gbps", sec > 0 ? r.bytes / sec * 1e-9 : 0},
                       {"weight_bytes", r.weight_bytes}});
  }
  nlohmann::json out = {{"model", pr.model},
                        {"device", pr.device},
                        {"steps", a.steps},
                        {"step_ms", step_ms},
                        {"dispatches_per_step", p->dispatches},
                        {"barriers_per_step", p->barriers},
                        {"barriers_per_dispatch", p->dispatches ? double(p->barriers) / double(p->dispatches) : 0},
                        {"weight_bytes_per_step", weight_bytes},
                        {"session_ready_s", pr.ready_s},
                        {"pipelines", pr.pipelines},
                        {"pipeline_cache", pr.cache},
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
                        {"args",
                         {{"dispatch", l.dispatch},
                          {"flops", l.flops},
                          {"bytes", l.bytes},
                          {"weight_bytes", l.weight_bytes},
                          {"operands", l.operands}}}});
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
  std::printf("%s on %s: %.2f ms per step, %llu dispatches, %llu barriers, %.4g weight bytes, ready in %.3f s\n",
              pr.model.c_str(), pr.device.c_str(), step_ms, static_cast<unsigned long long>(p->dispatches),
              static_cast<unsigned long long>(p->barriers), weight_bytes, pr.ready_s);
  std::printf("%-32s %6s %10s %7s %9s %9s %12s\n", "kernel:op", "count", "ms", "share", "GFLOP/s", "GB/s",
              "weight bytes");
  for (auto& k : kernels) {
    std::printf("%-32s %6llu %10.3f %6.1f%% %9.2f %9.2f %12.4g\n", k["kernel"].get<std::string>().c_str(),
                static_cast<unsigned long long>(k["count"].get<uint64_t>()), k["ms"].get<double>(),
                100 * k["share"].get<double>(), k["gflops"].get<double>(), k["gbps"].get<double>(),
                k["weight_bytes"].get<double>());
  }
  return 0;
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  CLI::App* c = app.add_subcommand(
      "profile", "time a model's training step (or a Llama model's decode step) per dispatch on a Vulkan device");
  CLI::Option* model = c->add_option("--model", a->model, "mlp | chargpt")->check(CLI::IsMember({"mlp", "chargpt"}));
  c->add_option("--config", a->config,
                "a Llama model's config.json (or its directory): profile its decode step with random weights instead, "
                "each dispatch with the weight bytes it reads")
      ->check(CLI::ExistingPath)
      ->excludes(model);
  c->add_option("--weights-dtype", a->weights_dtype, "with --config: the matrices' format, f32 | q8_0 | q4_0")
      ->check(CLI::IsMember({"f32", "q8_0", "q4_0"}));
  c->add_option("--max-context", a->max_context, "with --config: key/value cache positions (default 256)")
      ->check(CLI::PositiveNumber);
  c->add_option("--width", a->sizes.width, "model width")->check(CLI::PositiveNumber);
  c->add_option("--layers", a->sizes.layers, "layers")->check(CLI::PositiveNumber);
  c->add_option("--device", a->device, "vulkan or a Vulkan device's index or name");
  c->add_option("--precision", a->precision,
                "strict | accelerated | accelerated-bf16: the products' precision contract (a kernel reading 16-bit "
                "operands shows as kernel:op@f16)")
      ->check(CLI::IsMember({"strict", "accelerated", "accelerated-bf16"}));
  c->add_option("--steps", a->steps, "profiled steps (averaged; with --config, decoded tokens)")
      ->check(CLI::PositiveNumber);
  c->add_option("--trace", a->trace, "write a Chrome-trace JSON (Perfetto opens it)");
  c->add_flag("--json", a->json, "JSON on stdout");
  c->callback([a] { throw CLI::RuntimeError(run_profile(*a)); });
}

}  // namespace meganeura::cli
