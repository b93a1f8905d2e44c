// ResNet-50's convolutions on each Vulkan device: every distinct convolution of the network
// (torchvision's, batch 4 by default as in the workload's full shape), forward, input gradient
// (not for the first layer, whose input needs none) and weight gradient, timed per dispatch with
// timestamp queries over --reps runs after a warm-up, and the whole set weighted by how often
// the network uses each shape: the convolution work of one training pass. GFLOP/s counts
// 2 N O OH OW (C / groups) KH KW per pass. A benchmark, not a test.
// Usage: bench_vulkan_conv [--batch N] [--reps N] [--kernels auto,naive,shared_memory,direct] [--json]
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "graph/internal.h"
#include "kernels_option.h"
#include "meganeura/backend.h"
#include "meganeura/program.h"
#include "meganeura/vulkan.h"

using namespace meganeura;

namespace {

struct Shape2d {
  int64_t c, o, k, stride, hw, count;  // pad k / 2
};

// Every distinct convolution of ResNet-50 (stride on the 3x3 layers) and its occurrences.
const Shape2d kResNet50[] = {
    {3, 64, 7, 2, 224, 1},     {64, 64, 1, 1, 56, 1},    {64, 64, 3, 1, 56, 3},    {64, 256, 1, 1, 56, 4},
    {256, 64, 1, 1, 56, 2},    {256, 128, 1, 1, 56, 1},  {128, 128, 3, 2, 56, 1},  {128, 512, 1, 1, 28, 4},
    {256, 512, 1, 2, 56, 1},   {512, 128, 1, 1, 28, 3},  {128, 128, 3, 1, 28, 3},  {512, 256, 1, 1, 28, 1},
    {256, 256, 3, 2, 28, 1},   {256, 1024, 1, 1, 14, 6}, {512, 1024, 1, 2, 28, 1}, {1024, 256, 1, 1, 14, 5},
    {256, 256, 3, 1, 14, 5},   {1024, 512, 1, 1, 14, 1}, {512, 512, 3, 2, 14, 1},  {512, 2048, 1, 1, 7, 3},
    {1024, 2048, 1, 2, 14, 1}, {2048, 512, 1, 1, 7, 2},  {512, 512, 3, 1, 7, 2}};

std::string label(const Shape2d& s) {
  return std::to_string(s.c) + "->" + std::to_string(s.o) + " " + std::to_string(s.k) + "x" + std::to_string(s.k) +
         " s" + std::to_string(s.stride) + " @" + std::to_string(s.hw);
}

struct Entry {
  std::string output, conv, pass;
  int64_t count;
  double flops = 0, ms = 0;  // per run
};

// One program with every convolution's passes; per-dispatch times from the profile.
std::vector<Entry> run(const VulkanOptions& o, int64_t batch, int reps) {
  Graph g;
  std::vector<Entry> entries;
  std::map<std::string, std::vector<float>> inputs;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  auto input = [&](const std::string& name, const Shape& s) {
    std::vector<float> v(size_t(numel(s)));
    for (float& x : v) x = u(rng);
    inputs[name] = std::move(v);
    return g.input(name, s);
  };
  for (size_t i = 0; i < std::size(kResNet50); ++i) {
    const Shape2d& s = kResNet50[i];
    const std::string id = std::to_string(i);
    const int64_t pad = s.k / 2, out = (s.hw + 2 * pad - s.k) / s.stride + 1;
    Tensor x = input("x" + id, {batch, s.c, s.hw, s.hw}), w = input("w" + id, {s.o, s.c, s.k, s.k});
    Tensor dy = input("dy" + id, {batch, s.o, out, out});
    ConvAttrs a{{s.stride, s.stride}, {pad, pad}, {1, 1}, 1, x.shape()};
    g.output("y" + id, conv2d(x, w, Conv2dOptions{s.stride, s.stride, pad, pad, 1, 1, 1}));
    entries.push_back({"y" + id, label(s), "forward", s.count});
    if (i > 0) {
      g.output("dx" + id, conv2d_backward_input(dy, w, a));
      entries.push_back({"dx" + id, label(s), "input gradient", s.count});
    }
    a.grad_shape = w.shape();
    g.output("dw" + id, conv2d_backward_weight(x, dy, a));
    entries.push_back({"dw" + id, label(s), "weight gradient", s.count});
  }
  auto b = make_vulkan_backend(o);
  const Program p = plan(g, PlanOptions{DType::f32, b->limits()});
  const size_t idx = b->add_program(p);
  for (const auto& [name, v] : inputs) b->write(name, v.data(), v.size() * 4);
  b->run(idx);  // warm-up, profiled too: timed runs are summed below, minus this one
  std::vector<double> warm;
  for (const auto& l : vulkan_profile(*b, idx)->launches) warm.push_back(l.ms);
  for (int r = 0; r < reps; ++r) b->run(idx);
  const VulkanProgramProfile& prof = *vulkan_profile(*b, idx);
  // Each pass's dispatch writes its output; the launches of a dispatch add up.
  std::map<std::string, Entry*> by_output;
  for (Entry& e : entries) by_output[e.output] = &e;
  for (size_t i = 0; i < prof.launches.size(); ++i) {
    const auto& l = prof.launches[i];
    auto it = by_output.find(p.tensors[p.dispatches[l.dispatch].write()].binding);
    if (it == by_output.end())
      throw std::runtime_error("a dispatch (" + l.op + ") that writes no convolution's output");
    it->second->ms += (l.ms - warm[i]) / reps;
    it->second->flops += l.flops;
  }
  return entries;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 4;
  int reps = 3;
  bool json = false;
  std::vector<std::string> kernels = {"auto"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--batch" && i + 1 < argc) {
      batch = std::stoll(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--kernels" && i + 1 < argc) {
      kernels.clear();
      std::stringstream ss(argv[++i]);
      for (std::string t; std::getline(ss, t, ',');) kernels.push_back(t);
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "usage: %s [--batch N] [--reps N] [--kernels auto,naive,shared_memory,direct] [--json]\n",
                   argv[0]);
      return 2;
    }
  }
  nlohmann::json out = nlohmann::json::array();
  std::vector<VulkanDeviceInfo> devices;
  try {
    devices = vulkan_devices();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "no Vulkan: %s\n", e.what());
  }
  for (const VulkanDeviceInfo& d : devices) {
    for (const std::string& k : kernels) {
      nlohmann::json row = {{"backend", "vulkan:" + d.name}, {"kernels", k}, {"batch", batch}};
      try {
        VulkanOptions o;
        o.device = std::to_string(d.index);
        o.kernels = bench::kernels_named(k);
        o.profile = true;
        const std::vector<Entry> entries = run(o, batch, reps);
        double flops = 0, ms = 0;
        nlohmann::json passes = nlohmann::json::array();
        if (!json) std::printf("vulkan:%s, %s kernels, batch %lld\n", d.name.c_str(), k.c_str(), (long long)batch);
        for (const Entry& e : entries) {
          flops += double(e.count) * e.flops;
          ms += double(e.count) * e.ms;
          const double gflops = e.ms > 0 ? e.flops / e.ms * 1e-6 : 0;
          passes.push_back({{"conv", e.conv}, {"pass", e.pass}, {"count", e.count}, {"ms", e.ms}, {"gflops", gflops}});
          if (!json)
            std::printf("  %-24s %-16s x%lld %10.2f ms %9.2f GFLOP/s\n", e.conv.c_str(), e.pass.c_str(),
                        (long long)e.count, e.ms, gflops);
        }
        row.update(
            {{"passes", passes}, {"total_ms", ms}, {"total_gflop", flops * 1e-9}, {"gflops", flops / ms * 1e-6}});
        if (!json) std::printf("  total: %.1f GFLOP in %.1f ms, %.2f GFLOP/s\n", flops * 1e-9, ms, flops / ms * 1e-6);
      } catch (const std::exception& e) {
        row["error"] = e.what();
        if (!json) std::printf("vulkan:%s, %s kernels: error: %s\n", d.name.c_str(), k.c_str(), e.what());
      }
      out.push_back(row);
    }
  }
  if (json) std::cout << out.dump(2) << "\n";
  return 0;
}
