// SGEMM (C = A B, square, f32) on the CPU backend and on every Vulkan device, side by side:
// per size the median, fastest and slowest of --reps whole runs (submission and wait
// included, after one warm-up run), as GFLOP/s (2 n^3 per product), and the process's CPU time
// per product as GFLOP per CPU-second, which a machine shared with other jobs disturbs less than
// wall time. On Vulkan, each kernel family of --kernels runs in the same invocation; the table
// gives each one's ratio to the first GEMM kernel ("naive") when that is among them, and the
// largest difference from the CPU backend's product (relative to the largest |C|), so a fast
// wrong kernel cannot pass unnoticed. A benchmark, not a test.
// Usage: bench_vulkan_sgemm [--sizes 256,512,1024,2048,4096] [--reps N]
//                           [--kernels auto,naive,shared_memory,direct] [--no-cpu] [--json]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kernels_option.h"
#include "meganeura/backend.h"
#include "meganeura/program.h"

using namespace meganeura;

namespace {

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

struct Sample {
  std::vector<double> wall, cpu;  // seconds per product
  std::vector<float> c;           // the product, for the comparison
};

Sample time_sgemm(Backend& b, int64_t n, int reps) {
  Graph g;
  Tensor a = g.input("a", {n, n});
  Tensor x = g.input("b", {n, n});
  g.output("c", matmul(a, x));
  const size_t idx = b.add_program(plan(g));
  std::vector<float> va(size_t(n * n)), vb(va.size());
  for (size_t i = 0; i < va.size(); ++i) {
    va[i] = float((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    vb[i] = float((i * 40503u + 7) % 997) * 1e-3f - 0.5f;
  }
  b.write("a", va.data(), va.size() * 4);
  b.write("b", vb.data(), vb.size() * 4);
  b.run(idx);  // warm-up: first-touch and pipeline creation are not timed
  Sample s;
  for (int r = 0; r < reps; ++r) {
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    b.run(idx);
    s.wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    s.cpu.push_back(cpu_seconds() - c0);
  }
  s.c.resize(va.size());
  b.read("c", s.c.data(), s.c.size() * 4);
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double max_difference(const std::vector<float>& got, const std::vector<float>& want) {
  double d = 0, scale = 1e-30;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    d = std::max(d, std::abs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return got.size() == want.size() ? d / scale : INFINITY;
}

struct Target {
  std::string label, kernels;
  std::function<std::unique_ptr<Backend>()> make;
};

std::vector<Target> targets(const std::vector<std::string>& kernels, bool with_cpu) {
  std::vector<Target> t;
  if (with_cpu) t.push_back({"cpu", "", [] { return make_cpu_backend(); }});
  try {
    for (const auto& d : vulkan_devices()) {
      for (const std::string& k : kernels) {
        VulkanOptions o;
        o.device = std::to_string(d.index);
        o.kernels = bench::kernels_named(k);
        t.push_back({"vulkan:" + d.name, k, [o] { return make_vulkan_backend(o); }});
      }
    }
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "no Vulkan: %s\n", e.what());
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {256, 512, 1024, 2048, 4096};
  std::vector<std::string> kernels = {"auto"};
  int reps = 3;
  bool json = false, with_cpu = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto list = [&] {
      std::vector<std::string> v;
      std::stringstream ss(argv[++i]);
      for (std::string t; std::getline(ss, t, ',');) v.push_back(t);
      return v;
    };
    if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      for (const std::string& t : list()) sizes.push_back(std::stoll(t));
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--kernels" && i + 1 < argc) {
      kernels = list();
    } else if (a == "--no-cpu") {
      with_cpu = false;
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--sizes 256,512,...] [--reps N] [--kernels auto,naive,...] [--no-cpu] [--json]\n",
                   argv[0]);
      return 2;
    }
  }
  nlohmann::json out = nlohmann::json::array();
  if (!json) {
    std::printf("%-40s %-13s %5s %9s %17s %11s %8s %9s\n", "backend", "kernels", "n", "ms", "GFLOP/s (min-max)",
                "GFLOP/cpu-s", "vs naive", "max diff");
  }
  std::map<int64_t, std::vector<float>> reference;  // the CPU backend's products
  std::map<std::pair<std::string, int64_t>, double> naive;
  for (const auto& t : targets(kernels, with_cpu)) {
    for (int64_t n : sizes) {
      const double flop = 2.0 * double(n) * double(n) * double(n);
      nlohmann::json row = {{"backend", t.label}, {"kernels", t.kernels}, {"n", n}};
      try {
        auto b = t.make();
        Sample s = time_sgemm(*b, n, reps);
        const double med = median(s.wall), cpu = median(s.cpu);
        const double lo = *std::max_element(s.wall.begin(), s.wall.end()),
                     hi = *std::min_element(s.wall.begin(), s.wall.end());
        if (t.label == "cpu") reference[n] = s.c;
        if (t.kernels == "naive") naive[{t.label, n}] = med;
        const double diff = reference.count(n) ? max_difference(s.c, reference[n]) : NAN;
        const double ratio = naive.count({t.label, n}) ? naive[{t.label, n}] / med : NAN;
        row.update({{"ms", med * 1e3},
                    {"gflops", flop / med * 1e-9},
                    {"gflops_min", flop / lo * 1e-9},
                    {"gflops_max", flop / hi * 1e-9},
                    {"gflop_per_cpu_s", flop / cpu * 1e-9},
                    {"samples_s", s.wall},
                    {"cpu_s", s.cpu}});
        if (!std::isnan(ratio)) row["speedup_vs_naive"] = ratio;
        if (!std::isnan(diff)) row["max_rel_diff_vs_cpu"] = diff;
        if (!json) {
          char speedup[32] = "";
          if (!std::isnan(ratio)) std::snprintf(speedup, sizeof speedup, "%.2fx", ratio);
          std::printf("%-40s %-13s %5lld %9.2f %6.2f (%.2f-%.2f) %11.2f %8s %9.1e\n", t.label.c_str(),
                      t.kernels.c_str(), static_cast<long long>(n), med * 1e3, flop / med * 1e-9, flop / lo * 1e-9,
                      flop / hi * 1e-9, flop / cpu * 1e-9, speedup, diff);
        }
      } catch (const std::exception& e) {
        row["error"] = e.what();
        if (!json)
          std::printf("%-40s %-13s %5lld  error: %s\n", t.label.c_str(), t.kernels.c_str(), static_cast<long long>(n),
                      e.what());
      }
      out.push_back(row);
      std::fflush(stdout);
    }
  }
  if (json) std::cout << out.dump(2) << "\n";
  return 0;
}
