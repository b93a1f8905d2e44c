// The Vulkan backend through the CLI, validation layer on (MEGANEURA_VULKAN_VALIDATION=1: any
// message makes the command fail): device listing, training curves against the CPU backend,
// checkpoints crossing backends, and the per-dispatch profile.
//
// Loss tolerance: 1e-3 relative per step. Both backends compute in f32 but sum in different
// orders (BLAS blocks vs. tiles and trees), so per-step losses differ by ~1e-6 at first and
// the difference grows slowly through the updates; a wrong kernel moves losses by far more.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "cli_run.h"
#include "meganeura/program.h"
#include "meganeura/session.h"
#include "vulkan_test_util.h"

namespace fs = std::filesystem;

namespace {

using cli_run::Result;

fs::path dir() {
  static const fs::path d = cli_run::temp_dir("meganeura_vkcli_");
  return d;
}

Result run(const std::string& args, const std::string& env = "") {
  // A private cache directory: no state shared with the user or with earlier runs.
  return cli_run::run(
      args, dir(),
      env + " MEGANEURA_VULKAN_VALIDATION=" + (meganeura::testing_vulkan::validation_wanted() ? "1" : "0") +
          " XDG_CACHE_HOME=" + (dir() / "cache").string());
}

void expect_curves_match(const nlohmann::json& gpu, const nlohmann::json& cpu, double tol) {
  ASSERT_EQ(gpu["losses"].size(), cpu["losses"].size());
  for (size_t i = 0; i < cpu["losses"].size(); ++i) {
    const double a = gpu["losses"][i].get<double>(), b = cpu["losses"][i].get<double>();
    EXPECT_NEAR(a, b, tol * std::abs(b)) << "step " << i + 1;
  }
}

TEST(VulkanCli, DevicesListsWhatAutoPicks) {
  Result r = run("devices --json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = r.json();
  const std::string why = meganeura::testing_vulkan::missing_device();
  if (!why.empty()) {
    EXPECT_EQ(j["auto"], "cpu");
    EXPECT_TRUE(j.contains("error") || j["devices"].empty()) << r.out;
    GTEST_SKIP() << "skipped: " << why;
  }
  ASSERT_FALSE(j["devices"].empty());
  bool gpu = false;
  for (auto& d : j["devices"]) {
    for (const char* k : {"name", "vendor", "driver", "type", "heaps", "subgroup_size", "f16", "bf16", "int8",
                          "cooperative_matrix", "accelerated", "limits"}) {
      EXPECT_TRUE(d.contains(k)) << k;
    }
    EXPECT_GT(d["limits"]["max_storage_buffer_range"].get<uint64_t>(), 0u);
    gpu |= d["type"] == "discrete" || d["type"] == "integrated";
  }
  // A CPU-emulated device (lavapipe) is never what auto picks.
  EXPECT_EQ(j["auto"], gpu ? "vulkan" : "cpu");
}

TEST(VulkanCli, AutoFallsBackToTheCpuSayingSo) {
  MEGANEURA_REQUIRE_VULKAN();
  Result d = run("devices --json");
  if (d.json()["auto"] != "cpu") GTEST_SKIP() << "skipped: this machine has a GPU, auto uses it";
  Result r = run("train --model mlp --steps 2 --device auto --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("using the CPU backend"), std::string::npos) << r.err;
  EXPECT_EQ(r.json()["device"].get<std::string>().rfind("cpu", 0), 0u);
}

// A loader without any driver (its ICD list points nowhere): a clear message for vulkan,
// and auto runs on the CPU saying why.
TEST(VulkanCli, NoDriverIsAClearMessage) {
  const std::string no_driver = "VK_ICD_FILENAMES=/nonexistent/icd.json VK_DRIVER_FILES=/nonexistent/icd.json";
  Result v = run("train --model mlp --steps 2 --device vulkan", no_driver);
  EXPECT_NE(v.status, 0);
  EXPECT_TRUE(v.err.find("no Vulkan device") != std::string::npos ||
              v.err.find("no Vulkan loader") != std::string::npos ||
              v.err.find("VK_ERROR_INCOMPATIBLE_DRIVER") != std::string::npos)
      << v.err;
  Result a = run("train --model mlp --steps 2 --device auto --json", no_driver);
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_NE(a.err.find("using the CPU backend"), std::string::npos) << a.err;
  Result d = run("devices --json", no_driver);
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_EQ(d.json()["auto"], "cpu");
}

TEST(VulkanCli, UnknownDeviceNamesTheDevices) {
  MEGANEURA_REQUIRE_VULKAN();
  Result r = run("train --model mlp --steps 2 --device no-such-gpu");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("no Vulkan device matches 'no-such-gpu' (devices: 0: "), std::string::npos) << r.err;
}

// `program --json` plans each dispatch's Vulkan launches for lavapipe without the device (the
// default) and reports their loop iterations per invocation: the chargpt step's all within
// lavapipe's budget, each dispatch's figure the largest of its launches'. An unknown device is
// a one-line error naming the devices.
TEST(VulkanCli, ProgramJsonReportsLoopIterationsPerDispatch) {
  Result r = run("program --model chargpt --json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = r.json();
  ASSERT_TRUE(j.contains("vulkan")) << "no Vulkan plan in the program JSON";
  EXPECT_EQ(j["vulkan"]["loop_budget"], 32768);
  EXPECT_NE(j["vulkan"]["device"].get<std::string>().find("llvmpipe"), std::string::npos);
  size_t launches = 0;
  for (const auto& d : j["dispatches"]) {
    ASSERT_TRUE(d.contains("vulkan")) << d.dump();
    uint64_t most = 0;
    for (const auto& l : d["vulkan"]["launches"]) {
      most = std::max(most, l["loop_iterations"].get<uint64_t>());
      EXPECT_FALSE(l["kernel"].get<std::string>().empty());
      EXPECT_GE(l["workgroup_size"].get<uint32_t>(), 1u);
      ++launches;
    }
    EXPECT_EQ(d["vulkan"]["loop_iterations"].get<uint64_t>(), most) << d["op"];
    EXPECT_LE(most, 32768u) << d["op"];
  }
  EXPECT_GE(launches, j["dispatches"].size() / 2);  // views copy nothing, some ops take several launches
  Result bad = run("program --model mlp --json --vulkan no-such-device");
  EXPECT_NE(bad.status, 0);
  if (meganeura::testing_vulkan::missing_device().empty()) {  // else the message says what is missing
    EXPECT_NE(bad.err.find("[program] no Vulkan device 'no-such-device'"), std::string::npos) << bad.err;
  }
}

TEST(VulkanCli, MlpTrainsLikeTheCpuBackend) {
  MEGANEURA_REQUIRE_VULKAN();
  Result g = run("train --model mlp --device vulkan --steps 20 --json");
  Result c = run("train --model mlp --device cpu --steps 20 --json");
  ASSERT_EQ(g.status, 0) << g.err;
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(g.json()["device"].get<std::string>().find("vulkan"), std::string::npos);
  expect_curves_match(g.json(), c.json(), 1e-3);
  EXPECT_LT(g.json()["final_loss"].get<double>(), 0.6 * g.json()["losses"][0].get<double>());
}

TEST(VulkanCli, ChargptTrainsLikeTheCpuBackend) {
  MEGANEURA_REQUIRE_VULKAN();
  const std::string args = " --model chargpt --width 32 --layers 1 --steps 6 --json";
  Result g = run("train --device vulkan" + args);
  Result c = run("train --device cpu" + args);
  ASSERT_EQ(g.status, 0) << g.err;
  ASSERT_EQ(c.status, 0) << c.err;
  expect_curves_match(g.json(), c.json(), 1e-3);
}

// Evaluation of one checkpoint on both backends agrees (test loss within 1e-4 relative: one
// forward pass of f32 rounding differences).
TEST(VulkanCli, CheckpointsCrossBackends) {
  MEGANEURA_REQUIRE_VULKAN();
  for (std::string trained_on : {"vulkan", "cpu"}) {
    const std::string ck = (dir() / ("mlp_" + trained_on + ".safetensors")).string();
    Result t = run("train --model mlp --steps 10 --json --device " + trained_on + " --out " + ck);
    ASSERT_EQ(t.status, 0) << t.err;
    Result on_gpu = run("infer --model mlp --json --device vulkan --checkpoint " + ck);
    Result on_cpu = run("infer --model mlp --json --device cpu --checkpoint " + ck);
    ASSERT_EQ(on_gpu.status, 0) << on_gpu.err;
    ASSERT_EQ(on_cpu.status, 0) << on_cpu.err;
    const double a = on_gpu.json()["test_loss"].get<double>(), b = on_cpu.json()["test_loss"].get<double>();
    EXPECT_NEAR(a, b, 1e-4 * b) << "trained on " << trained_on;
    EXPECT_EQ(on_gpu.json()["test_accuracy"], on_cpu.json()["test_accuracy"]) << "trained on " << trained_on;
  }
}

// A chargpt checkpoint evaluated in Q8_0 and Q4_0 blocks (infer --weights-dtype): the same
// blocks on both backends, so the losses agree to f32 summation order (1e-4 relative).
TEST(VulkanCli, QuantisedInferenceMatchesTheCpu) {
  MEGANEURA_REQUIRE_VULKAN();
  const std::string ck = (dir() / "chargpt_q.safetensors").string();
  Result t = run("train --model chargpt --width 64 --steps 40 --json --device cpu --out " + ck);
  ASSERT_EQ(t.status, 0) << t.err;
  for (std::string dtype : {"q8_0", "q4_0"}) {
    const std::string args =
        " --model chargpt --width 64 --json --max-new-tokens 24 --weights-dtype " + dtype + " --checkpoint " + ck;
    Result on_gpu = run("infer --device vulkan" + args), on_cpu = run("infer --device cpu" + args);
    ASSERT_EQ(on_gpu.status, 0) << on_gpu.err;
    ASSERT_EQ(on_cpu.status, 0) << on_cpu.err;
    const double a = on_gpu.json()["eval_loss"].get<double>(), b = on_cpu.json()["eval_loss"].get<double>();
    EXPECT_NEAR(a, b, 1e-4 * b) << dtype;
    EXPECT_EQ(on_gpu.json()["weight_bytes"], on_cpu.json()["weight_bytes"]) << dtype;
  }
}

TEST(VulkanCli, ProfileReportsKernelsAndATrace) {
  MEGANEURA_REQUIRE_VULKAN();
  const std::string trace = (dir() / "trace.json").string();
  Result r = run("profile --model chargpt --width 32 --device vulkan --steps 1 --json --trace " + trace);
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = r.json();
  const double dispatches = j["dispatches_per_step"].get<double>();
  EXPECT_GT(dispatches, 0);
  EXPECT_LE(j["barriers_per_dispatch"].get<double>(), 0.6);
  double share = 0, count = 0;
  for (auto& k : j["kernels"]) {
    share += k["share"].get<double>();
    count += k["count"].get<double>();
  }
  EXPECT_EQ(count, dispatches);  // every dispatch is attributed to a kernel
  EXPECT_GT(share, 0.5);         // the kernels account for most of the step
  EXPECT_LE(share, 1.0001);
  std::ifstream f(trace);
  auto t = nlohmann::json::parse(f);
  EXPECT_EQ(t["traceEvents"].size(), size_t(dispatches));
  EXPECT_EQ(t["traceEvents"][0]["ph"], "X");
}

// A program planned by `program --device vulkan` carries the device's limits, so a Vulkan
// session accepts it (one planned without limits is refused) and computes what the CPU does.
TEST(VulkanCli, ProgramPlannedForTheDeviceRunsThere) {
  const std::string why = meganeura::testing_vulkan::missing_device();
  if (!why.empty()) GTEST_SKIP() << "skipped: " << why;
  Result planned = run("program --model mlp --inference --json --device vulkan");
  ASSERT_EQ(planned.status, 0) << planned.err;
  Result unplanned = run("program --model mlp --inference --json");
  ASSERT_EQ(unplanned.status, 0) << unplanned.err;
  using meganeura::Program;
  using meganeura::Session;
  using meganeura::SessionOptions;
  auto session = [](meganeura::Device d) {
    SessionOptions o{.device = d, .seed = 5};
    o.vulkan_cache_dir = "-";
    o.vulkan_validation = meganeura::testing_vulkan::validation_wanted();
    return Session(o);
  };
  const Program p = Program::from_json(planned.out);
  EXPECT_GE(p.limits.offset_alignment, 16u);
  Session vk = session(meganeura::Device::vulkan);
  try {
    vk.add(Program::from_json(unplanned.out));
    ADD_FAILURE() << "a program planned without limits was accepted on Vulkan";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("planned for buffers"), std::string::npos) << e.what();
  }
  Session cpu = session(meganeura::Device::cpu);  // its own plan (the CPU backend aligns to 256 bytes)
  vk.add(p);
  cpu.add(Program::from_json(unplanned.out));
  std::vector<float> x;
  for (const auto& e : p.externals) {
    if (e.role != meganeura::Role::input) continue;
    x.resize(size_t(e.type.numel()));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(0.37 * double(i)));
    vk.set(e.name, std::span<const float>(x));
    cpu.set(e.name, std::span<const float>(x));
  }
  vk.run();
  cpu.run();
  size_t outputs = 0;
  for (const auto& e : p.externals) {
    if (e.role != meganeura::Role::output) continue;
    ++outputs;
    const auto a = vk.get(e.name), b = cpu.get(e.name);
    ASSERT_EQ(a.size(), b.size());
    // Same f32 parameters from the same seed; sums of 16 and 128 terms in different orders:
    // 1e-4 of the output's scale is far above their rounding and far below any indexing error.
    double scale = 0;
    for (float v : b) scale = std::max(scale, double(std::abs(v)));
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4 * scale + 1e-6) << e.name << "[" << i << "]";
  }
  EXPECT_GT(outputs, 0u);
}

}  // namespace
