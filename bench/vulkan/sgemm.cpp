// SGEMM (C = A B, square, f32) on the CPU backend and on every Vulkan device, side by side:
// GFLOP/s (2 n^3 per product) and GB/s (the three matrices once) from wall-clock time of whole
// runs (submission and wait included), after one warm-up run. A benchmark, not a test.
// Usage: bench_vulkan_sgemm [--sizes 256,512,1024,2048,4096] [--reps N] [--json]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "meganeura/backend.h"
#include "meganeura/program.h"

using namespace meganeura;

namespace {

double time_sgemm(Backend& b, int64_t n, int reps) {
  Graph g;
  Tensor a = g.input("a", {n, n});
  Tensor x = g.input("b", {n, n});
  g.output("c", matmul(a, x));
  const size_t idx = b.add_program(plan(g));
  std::vector<float> v(size_t(n * n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  b.write("a", v.data(), v.size() * 4);
  b.write("b", v.data(), v.size() * 4);
  b.run(idx);  // warm-up: first-touch and pipeline creation are not timed
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) b.run(idx);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {256, 512, 1024, 2048, 4096};
  int reps = 3;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      std::stringstream ss(argv[++i]);
      for (std::string t; std::getline(ss, t, ',');) sizes.push_back(std::stoll(t));
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::stoi(argv[++i]);
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "usage: %s [--sizes 256,512,...] [--reps N] [--json]\n", argv[0]);
      return 2;
    }
  }
  struct Target {
    std::string label;
    std::function<std::unique_ptr<Backend>()> make;
  };
  std::vector<Target> targets = {{"cpu", [] { return make_cpu_backend(); }}};
  try {
    for (const auto& d : vulkan_devices()) {
      VulkanOptions o;
      o.device = std::to_string(d.index);
      targets.push_back({"vulkan:" + d.name, [o] { return make_vulkan_backend(o); }});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "no Vulkan: %s\n", e.what());
  }
  nlohmann::json out = nlohmann::json::array();
  if (!json) std::printf("%-48s %6s %10s %9s %9s\n", "backend", "n", "ms", "GFLOP/s", "GB/s");
  for (const auto& t : targets) {
    for (int64_t n : sizes) {
      try {
        auto b = t.make();
        const double s = time_sgemm(*b, n, reps);
        const double gflops = 2.0 * double(n) * double(n) * double(n) / s * 1e-9,
                     gbps = 12.0 * double(n) * double(n) / s * 1e-9;
        out.push_back({{"backend", t.label}, {"n", n}, {"ms", s * 1e3}, {"gflops", gflops}, {"gbps", gbps}});
        if (!json)
          std::printf("%-48s %6lld %10.2f %9.2f %9.2f\n", t.label.c_str(), static_cast<long long>(n), s * 1e3, gflops,
                      gbps);
      } catch (const std::exception& e) {
        out.push_back({{"backend", t.label}, {"n", n}, {"error", e.what()}});
        if (!json) std::printf("%-48s %6lld  error: %s\n", t.label.c_str(), static_cast<long long>(n), e.what());
      }
      std::fflush(stdout);
    }
  }
  if (json) std::cout << out.dump(2) << "\n";
  return 0;
}
