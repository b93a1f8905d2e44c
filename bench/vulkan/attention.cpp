// Fused attention (attention_fused and its backward, f32) on every Vulkan device, and on the CPU
// backend with --cpu: milliseconds and GFLOP/s from wall-clock time of whole runs (submission
// and wait included), median of --reps runs after one warm-up. FLOPs as the op table counts
// them: 2 (d + dv) per visible query-key pair forward, 2 (3 d + 2 dv) backward. A benchmark,
// not a test.
// Usage: bench_vulkan_attention [--seq N] [--keys N] [--batch B] [--heads H] [--kv-heads H]
//          [--dim D] [--causal] [--backward] [--reps N] [--cpu] [--kernel-class gpu|cpu] [--json]
// --kernel-class runs another device class's attention kernel (the tiles of attention.comp or
// the rows of attention_rows.comp) on the devices.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "graph/internal.h"
#include "meganeura/backend.h"
#include "meganeura/program.h"

using namespace meganeura;

namespace {

struct Shape4 {
  int64_t b = 1, hq = 16, hkv = 16, sq = 2048, sk = 2048, d = 64;
  bool causal = false, backward = false;
};

double visible_pairs(const Shape4& s) {
  if (!s.causal) return double(s.sq) * double(s.sk);
  double n = 0;  // query i sees keys j <= i + sk - sq
  for (int64_t i = 0; i < s.sq; ++i) n += double(std::clamp<int64_t>(i + s.sk - s.sq + 1, 0, s.sk));
  return n;
}

double flops(const Shape4& s) {
  const double per_pair = s.backward ? 2.0 * (3 * s.d + 2 * s.d) : 2.0 * (s.d + s.d);
  return per_pair * visible_pairs(s) * double(s.b * s.hq);
}

std::vector<float> values(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(((i + seed) * 2654435761u) % 1000) * 2e-3f - 1.0f;
  return v;
}

// Median seconds of one run of the forward, or of the backward over a forward's saved output.
double time_attention(Backend& be, const Shape4& s, int reps) {
  Graph g;
  Tensor q = g.input("q", {s.b, s.hq, s.sq, s.d});
  Tensor k = g.input("k", {s.b, s.hkv, s.sk, s.d});
  Tensor v = g.input("v", {s.b, s.hkv, s.sk, s.d});
  const double scale = 0.125;
  Tensor packed = attention_fused_packed(q, k, v, s.causal, scale);
  g.output("packed", packed);
  size_t timed = be.add_program(plan(g));
  for (const char* name : {"q", "k", "v"}) {
    const int64_t n = name[0] == 'q' ? s.b * s.hq * s.sq * s.d : s.b * s.hkv * s.sk * s.d;
    auto x = values(n, uint32_t(name[0]));
    be.write(name, x.data(), x.size() * 4);
  }
  be.run(timed);  // the forward's output feeds the backward
  if (s.backward) {
    Graph gb;
    Tensor qb = gb.input("q", q.shape()), kb = gb.input("k", k.shape()), vb = gb.input("v", v.shape());
    Tensor pb = gb.input("packed", packed.shape()), gp = gb.input("gpacked", packed.shape());
    gb.output("grads", attention_fused_backward(qb, kb, vb, pb, gp,
                                                AttentionAttrs{s.causal, scale, q.shape(), k.shape(), v.shape()}));
    timed = be.add_program(plan(gb));
    auto x = values(packed.type().numel(), 7);
    be.write("gpacked", x.data(), x.size() * 4);
    be.run(timed);  // warm-up
  }
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    be.run(timed);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Options {
  Shape4 s;
  int reps = 3;
  bool json = false, cpu = false;
  std::string kernel_class;  // VulkanOptions::kernel_class
};

// The command line, or nothing after printing the usage.
std::optional<Options> parse(int argc, char** argv) {
  Options o;
  Shape4& s = o.s;
  bool kv_given = false, keys_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> int64_t {
      if (i + 1 >= argc) return -1;
      try {
        return std::stoll(argv[++i]);
      } catch (const std::exception&) {
        return -1;  // refused below with the usage
      }
    };
    if (a == "--seq")
      s.sq = next();
    else if (a == "--keys")
      s.sk = next(), keys_given = true;
    else if (a == "--batch")
      s.b = next();
    else if (a == "--heads")
      s.hq = next();
    else if (a == "--kv-heads")
      s.hkv = next(), kv_given = true;
    else if (a == "--dim")
      s.d = next();
    else if (a == "--reps")
      o.reps = int(next());
    else if (a == "--causal")
      s.causal = true;
    else if (a == "--backward")
      s.backward = true;
    else if (a == "--cpu")
      o.cpu = true;
    else if (a == "--json")
      o.json = true;
    else if (a == "--kernel-class" && i + 1 < argc &&
             (std::string(argv[i + 1]) == "gpu" || std::string(argv[i + 1]) == "cpu"))
      o.kernel_class = argv[++i];
    else
      s.b = -1;  // refused below
  }
  if (!keys_given) s.sk = s.sq;
  if (!kv_given) s.hkv = s.hq;
  if (s.b < 1 || s.hq < 1 || s.hkv < 1 || s.hq % s.hkv || s.sq < 1 || s.sk < 1 || s.d < 1 || o.reps < 1) {
    std::fprintf(
        stderr,
        "usage: %s [--seq N] [--keys N] [--batch B] [--heads H] [--kv-heads H] [--dim D] [--causal] "
        "[--backward] [--reps N] [--cpu] [--kernel-class gpu|cpu] [--json] (sizes positive, --heads a multiple of "
        "--kv-heads)\n",
        argv[0]);
    return std::nullopt;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Options> parsed = parse(argc, argv);
  if (!parsed) return 2;
  const Shape4& s = parsed->s;
  const int reps = parsed->reps;
  const bool json = parsed->json, cpu = parsed->cpu;
  struct Target {
    std::string label;
    std::function<std::unique_ptr<Backend>()> make;
  };
  std::vector<Target> targets;
  if (cpu) targets.push_back({"cpu", [] { return make_cpu_backend(); }});
  try {
    for (const auto& d : vulkan_devices()) {
      VulkanOptions o;
      o.device = std::to_string(d.index);
      o.kernel_class = parsed->kernel_class;
      targets.push_back({"vulkan:" + d.name, [o] { return make_vulkan_backend(o); }});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "no Vulkan: %s\n", e.what());
  }
  nlohmann::json out = nlohmann::json::array();
  const char* pass = s.backward ? "backward" : "forward";
  if (!json) std::printf("%-44s %-8s %6s %6s %10s %10s\n", "backend", "pass", "seq", "keys", "ms", "GFLOP/s");
  for (const auto& t : targets) {
    nlohmann::json r = {{"backend", t.label}, {"pass", pass}, {"batch", s.b}, {"heads", s.hq},      {"kv_heads", s.hkv},
                        {"seq", s.sq},        {"keys", s.sk}, {"dim", s.d},   {"causal", s.causal}, {"reps", reps}};
    try {
      auto be = t.make();
      const double sec = time_attention(*be, s, reps), gflops = flops(s) / sec * 1e-9;
      r["ms"] = sec * 1e3;
      r["gflops"] = gflops;
      if (!json)
        std::printf("%-44s %-8s %6lld %6lld %10.2f %10.1f\n", t.label.c_str(), pass, (long long)s.sq, (long long)s.sk,
                    sec * 1e3, gflops);
    } catch (const std::exception& e) {
      r["error"] = e.what();
      if (!json) std::printf("%-44s %-8s error: %s\n", t.label.c_str(), pass, e.what());
    }
    out.push_back(r);
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
