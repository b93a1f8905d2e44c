// meganeura bench: the timed phases of one workload (compile cold and warm, forward at the
// full and minimal shapes, forward + loss + backward, a whole training step), each with 5
// warm-ups and at least 20 samples: median, interquartile range and the raw samples; plus the
// planned arena of the training program and the process's peak memory.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>

#include "commands.h"
#include "meganeura/autodiff.h"
#include "meganeura/train.h"
#include "meganeura/workloads.h"

namespace meganeura::cli {
namespace {

struct BenchArgs {
  std::string workload, scale = "ci", device = "cpu";
  int samples = 20, warmup = 5;
  bool json = false;
  std::vector<std::string> phases;  // empty: all of them
};

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

nlohmann::json measure(const std::function<void()>& f, int warmup, int samples) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < samples; ++i) {
    const double t0 = now_ms();
    f();
    t.push_back(now_ms() - t0);
  }
  std::vector<double> s = t;
  std::sort(s.begin(), s.end());
  auto q = [&](double p) {
    const double x = p * double(s.size() - 1);
    const size_t i = size_t(x);
    return i + 1 < s.size() ? s[i] + (x - double(i)) * (s[i + 1] - s[i]) : s[i];
  };
  return {{"median_ms", q(0.5)}, {"iqr_ms", q(0.75) - q(0.25)}, {"samples_ms", t}};
}

void feed(Session& s, const models::Workload& w, const std::string& id) {
  auto v = models::synthetic_inputs(w, id, 1);
  // A forward-only program has no loss target: inputs it does not read are skipped.
  for (auto& [n, x] : v.floats)
    if (s.buffers().count(n)) s.set(n, std::span<const double>(x));
  for (auto& [n, x] : v.ints)
    if (s.buffers().count(n)) s.set(n, std::span<const int32_t>(x));
  // Initial values are drawn on first use: draw them here, so the first timed run (with no
  // warm-up) does not include them.
  s.initialise();
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

int run_bench(const BenchArgs& a) {
  const models::Scale scale = models::parse_scale(a.scale);
  SessionOptions so = base_session_options();
  so.device = parse_device(a.device);
  so.seed = 1;
  nlohmann::json phases;
  // compile: graph, autodiff, planning and session set-up of the training (grad) program; the
  // initial parameter values are drawn on first use and timed apart (initialise).
  auto compile = [&] {
    Graph g;
    models::Workload w = models::build_workload(g, a.workload, scale);
    g.output("loss", w.loss);
    output_parameter_gradients(g, w.loss);
    Session s(so);
    s.add(g);
    return s;
  };
  auto wanted = [&](const char* phase) {
    return a.phases.empty() || std::find(a.phases.begin(), a.phases.end(), phase) != a.phases.end();
  };
  double t0 = now_ms();
  uint64_t train_arena = 0;
  {
    Session s = compile();
    phases["compile_cold"] = {{"median_ms", now_ms() - t0}};
    train_arena = s.program(0).arena_bytes;
    // The random draw of the initial parameters, which the session defers to their first use.
    t0 = now_ms();
    s.initialise();
    phases["initialise"] = {{"median_ms", now_ms() - t0}};
  }
  if (wanted("compile")) phases["compile_warm"] = measure([&] { compile(); }, 1, 3);

  auto forward_phase = [&](bool minimal) {
    Graph g;
    models::Workload w = models::build_workload(g, a.workload, scale, minimal);
    for (auto& [n, t] : w.outputs) g.output(n, t);
    Session s(so);
    s.add(g);
    feed(s, w, a.workload);
    return measure([&] { s.run(); }, a.warmup, a.samples);
  };
  if (wanted("full")) phases["full"] = forward_phase(false);
  if (wanted("minimal")) phases["minimal"] = forward_phase(true);
  if (wanted("train")) {
    Graph g;
    models::Workload w = models::build_workload(g, a.workload, scale);
    g.output("loss", w.loss);
    output_parameter_gradients(g, w.loss);
    Session s(so);
    s.add(g);
    feed(s, w, a.workload);
    phases["train"] = measure([&] { s.run(); }, a.warmup, a.samples);
  }
  if (wanted("step")) {
    OptimizerConfig opt;
    opt.kind = OptimizerConfig::Kind::adamw;
    opt.lr = 1e-4;
    Trainer trainer([&](Graph& g) { return models::build_workload(g, a.workload, scale).loss; }, opt, so);
    Graph shape;
    models::Workload w = models::build_workload(shape, a.workload, scale);
    feed(trainer.session(), w, a.workload);
    phases["step"] = measure([&] { trainer.step(); }, a.warmup, a.samples);
  }
  const int64_t peak = peak_rss_bytes();
  nlohmann::json out = {{"workload", a.workload},
                        {"scale", a.scale},
                        {"side", "meganeura"},
                        {"machine", {{"cpu", cpu_model()}, {"cores", sysconf(_SC_NPROCESSORS_ONLN)}}},
                        {"device", a.device},
                        {"version", MEGANEURA_VERSION},
                        {"train_arena_bytes", train_arena},
                        {"peak_rss_bytes", peak},
                        {"phases", phases},
                        {"warmup", a.warmup},
                        {"samples", a.samples}};
  if (a.json) {
    std::cout << out.dump() << "\n";
    return 0;
  }
  for (const char* p : {"compile_cold", "compile_warm", "initialise", "full", "minimal", "train", "step"}) {
    if (!phases.contains(p)) continue;
    std::printf("%-13s median %10.2f ms\n", p, phases[p]["median_ms"].get<double>());
  }
  std::printf("training arena %.1f MB, peak RSS %.1f MB\n", double(train_arena) / 1e6, double(peak) / 1e6);
  return 0;
}

}  // namespace

// VmHWM of this process: getrusage's ru_maxrss survives exec, so a parent's footprint (a
// Python driver with PyTorch loaded) would be reported as ours.
int64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* c = app.add_subcommand("bench", "time the phases of a workload (compile, forward, backward, step)");
  c->add_option("--workload", a->workload, "smollm2 | smolvla | unet | resnet50 | whisper")
      ->required()
      ->check(CLI::IsMember({"smollm2", "smolvla", "unet", "resnet50", "whisper"}));
  c->add_option("--scale", a->scale, "full | ci")->check(CLI::IsMember({"full", "ci"}));
  c->add_option("--device", a->device, "cpu | vulkan | auto")->check(CLI::IsMember({"cpu", "vulkan", "auto"}));
  c->add_option("--samples", a->samples, "timed samples per phase (at least 20 for a stable median)")
      ->check(CLI::PositiveNumber);
  c->add_option("--warmup", a->warmup, "warm-up runs per phase")->check(CLI::NonNegativeNumber);
  c->add_flag("--json", a->json, "JSON on stdout");
  c->add_option("--phases", a->phases, "only these phases (the cold compile always runs: it gives the arena)")
      ->check(CLI::IsMember({"compile", "full", "minimal", "train", "step"}))
      ->delimiter(',');
  c->callback([a] { throw CLI::RuntimeError(run_bench(*a)); });
}

}  // namespace meganeura::cli
