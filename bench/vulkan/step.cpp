// chargpt's training step (the CLI's configuration: width 64, 2 layers, 4 heads, sequence 64,
// batch 16, AdamW) on a Vulkan device, with the rewrite passes (as sessions run it) and without
// them (the training graph as built), in one invocation: per mode the median, fastest and
// slowest of --steps timed steps after --warmup untimed ones, wall time from submission to
// fence, and the ratio of the two. --kernels picks the GEMM kernels. A benchmark, not a test.
// Usage: bench_vulkan_step [--steps N] [--warmup N] [--kernels auto|naive|shared_memory|direct] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kernels_option.h"
#include "meganeura/models.h"
#include "meganeura/passes.h"
#include "meganeura/session.h"
#include "meganeura/train.h"

using namespace meganeura;

namespace {

constexpr int64_t kBatch = 16;

struct Timing {
  std::vector<double> ms;
  size_t dispatches = 0;
};

Timing time_steps(bool passes, VulkanOptions::Kernels kernels, int steps, int warmup) {
  const models::Vocabulary vocab = models::vocabulary_of(models::builtin_text());
  models::CharGptConfig c;
  c.vocab = int64_t(vocab.chars.size());
  OptimizerConfig o;
  o.kind = OptimizerConfig::Kind::adamw;
  o.lr = 3e-3;
  o.weight_decay = 0.01;
  o.clip_norm = 1.0;
  Graph g = training_graph(
      [&](Graph& gg) {
        Tensor ids = gg.input("ids", {kBatch, c.seq}, DType::i32);
        Tensor targets = gg.input("targets", {kBatch * c.seq}, DType::i32);
        return cross_entropy(reshape(models::chargpt(gg, ids, c), {kBatch * c.seq, c.vocab}), targets);
      },
      o);
  SessionOptions so;
  so.device = Device::vulkan;
  so.seed = 1;
  so.vulkan_kernels = kernels;
  Session s(so);
  PassOptions none{false, false, false, false, false, false, s.backend().passes().decompose};
  const Graph run = optimize(g, passes ? s.backend().passes() : none);
  s.add(plan(run, PlanOptions{DType::f32, s.backend().limits()}));
  const std::vector<int32_t> tokens = vocab.encode(models::builtin_text());
  std::mt19937_64 rng(7);
  Timing t;
  t.dispatches = s.program(0).dispatches.size();
  for (int i = 0; i < warmup + steps; ++i) {
    std::vector<int32_t> ids(size_t(kBatch * c.seq)), targets(ids.size());
    for (int64_t b = 0; b < kBatch; ++b) {
      const size_t off = size_t(rng() % (tokens.size() - size_t(c.seq) - 1));
      for (int64_t k = 0; k < c.seq; ++k) {
        ids[size_t(b * c.seq + k)] = tokens[off + size_t(k)];
        targets[size_t(b * c.seq + k)] = tokens[off + size_t(k) + 1];
      }
    }
    s.set("ids", std::span<const int32_t>(ids));
    s.set("targets", std::span<const int32_t>(targets));
    const auto t0 = std::chrono::steady_clock::now();
    s.run();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) t.ms.push_back(ms);
  }
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5, warmup = 1;
  bool json = false;
  std::string kernels = "auto";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) {
      steps = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--warmup" && i + 1 < argc) {
      warmup = std::max(0, std::stoi(argv[++i]));
    } else if (a == "--kernels" && i + 1 < argc) {
      kernels = argv[++i];
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "usage: %s [--steps N] [--warmup N] [--kernels auto|naive|shared_memory|direct] [--json]\n",
                   argv[0]);
      return 2;
    }
  }
  VulkanOptions::Kernels family;
  try {
    family = bench::kernels_named(kernels);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  nlohmann::json out = nlohmann::json::object({{"model", "chargpt"}, {"kernels", kernels}});
  double with = 0, without = 0;
  for (bool passes : {true, false}) {
    const Timing t = time_steps(passes, family, steps, warmup);
    const double med = median(t.ms);
    (passes ? with : without) = med;
    const char* mode = passes ? "with_passes" : "without_passes";
    out[mode] = {{"median_ms", med},
                 {"min_ms", *std::min_element(t.ms.begin(), t.ms.end())},
                 {"max_ms", *std::max_element(t.ms.begin(), t.ms.end())},
                 {"samples_ms", t.ms},
                 {"dispatches", t.dispatches}};
    if (!json) {
      std::printf("chargpt step %-15s %9.1f ms (%.1f-%.1f), %zu dispatches\n", mode, med,
                  *std::min_element(t.ms.begin(), t.ms.end()), *std::max_element(t.ms.begin(), t.ms.end()),
                  t.dispatches);
    }
  }
  out["with_over_without"] = with / without;
  if (json)
    std::cout << out.dump(2) << "\n";
  else
    std::printf("with / without the passes: %.2f\n", with / without);
  return 0;
}
