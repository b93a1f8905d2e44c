// The loop budget: lavapipe counts every loop back-edge of an invocation against one budget of
// 65,535 and then silently leaves every loop, so the lowering plans each launch's worst case
// and refuses a launch above DeviceClass::loop_budget (32,768 on CPU-emulated devices). Here:
// the five workloads at full scale -- forward, training pass and a whole AdamW step with
// clipping -- lowered as for lavapipe (planning only, nothing runs), every launch within the
// budget; launches over it, or over the device's shared memory, refused with the op named; the
// plan the CLI reports; and every kernel's storage buffers declared Aliased. No device needed.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "backend/vulkan/lowering.h"
#include "backend/vulkan/pipelines.h"
#include "graph/op_table.h"
#include "meganeura/autodiff.h"
#include "meganeura/passes.h"
#include "meganeura/train.h"
#include "meganeura/workloads.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

VulkanDeviceInfo lavapipe() { return lavapipe_device_info(); }

// As the Vulkan backend plans a graph for lavapipe (Session::add with its passes and limits).
Program plan_for_lavapipe(const Graph& g) {
  PassOptions passes;
  passes.strided_reductions = false;
  DeviceLimits limits;
  const VulkanDeviceInfo info = lavapipe();
  limits.max_binding_bytes = info.max_storage_buffer_range;
  limits.max_allocation_bytes = info.max_memory_allocation_size;
  limits.offset_alignment = 16;
  return plan(optimize(g, passes), PlanOptions{DType::f32, limits});
}

enum class Phase { forward, train, step };
const char* phase_name(Phase p) { return p == Phase::forward ? "forward" : p == Phase::train ? "train" : "step"; }

Graph workload_graph(const std::string& id, Phase phase) {
  if (phase == Phase::step) {
    OptimizerConfig o;
    o.kind = OptimizerConfig::Kind::adamw;
    o.weight_decay = 0.01;
    o.clip_norm = 1.0;
    return training_graph([&](Graph& g) { return models::build_workload(g, id, models::Scale::full).loss; }, o);
  }
  Graph g;
  models::Workload w = models::build_workload(g, id, models::Scale::full);
  for (auto& [name, t] : w.outputs) g.output(name, t);
  g.output("loss", w.loss);
  if (phase == Phase::train) {
    std::vector<Tensor> params;
    for (NodeId p : g.parameters()) params.push_back(g.tensor(p));
    auto grads = grad(w.loss, params);
    for (size_t i = 0; i < params.size(); ++i) g.output("grad." + g.node(params[i].id).name, grads[i]);
  }
  return g;
}

struct Worst {
  uint64_t iterations = 0;
  std::string where;
};

// Every launch of every workload and phase at full scale within lavapipe's budget, with
// lavapipe's own kernel choices, with the GPU class's (attention.comp's tiles, 256-wide
// workgroups, 64-wide GEMM tiles: what `kernel_class = "gpu"` runs on lavapipe), and without
// subgroup arithmetic (the rows and reductions' workgroup trees); prints the worst launch of
// each kernel.
TEST(VulkanLoopBudget, FullScaleWorkloadsFitLavapipe) {
  std::map<std::string, Worst> worst;
  VulkanDeviceInfo no_subgroups = lavapipe();
  no_subgroups.subgroup_arithmetic = false;
  const std::pair<const char*, vk::DeviceClass> classes[] = {{"", vk::device_class(lavapipe())},
                                                             {" (gpu class)", vk::device_class(lavapipe(), "gpu")},
                                                             {" (no subgroups)", vk::device_class(no_subgroups)}};
  for (const auto& [label, dc] : classes) {
    ASSERT_EQ(dc.loop_budget, 32768u);
    for (const char* id : {"smollm2", "smolvla", "unet", "resnet50", "whisper"}) {
      for (Phase phase : {Phase::forward, Phase::train, Phase::step}) {
        const Program p = plan_for_lavapipe(workload_graph(id, phase));
        for (const vk::Launch& l : vk::plan_launches(p, dc)) {  // all of them, judged here
          const Dispatch& d = p.dispatches[l.dispatch];
          const std::string where =
              std::string(id) + " " + phase_name(phase) + " " + std::string(op_name(d.op)) + label;
          const std::string kernel = vk::kernel_name(l.kernel);
          EXPECT_LE(l.loop_iterations, dc.loop_budget) << where << " (" << kernel << ")";
          Worst& w = worst[kernel];
          if (l.loop_iterations >= w.iterations) w = {l.loop_iterations, where};
        }
      }
    }
  }
  for (auto& [kernel, w] : worst) {
    std::printf("%-10s worst %6llu loop iterations per invocation (%s)\n", kernel.c_str(),
                static_cast<unsigned long long>(w.iterations), w.where.c_str());
  }
}

// A launch over the budget is refused when the program is lowered, naming the op and the count:
// a layer norm over a row of 3,000,000 (three passes of 11,719 strided steps each).
TEST(VulkanLoopBudget, LaunchOverTheBudgetIsRefusedNamingTheOp) {
  Graph g;
  Tensor x = g.input("x", {1, 3000000});
  g.output("y", layer_norm(x, {}, {}));
  const Program p = plan_for_lavapipe(g);
  try {
    vk::lower_program(p, vk::device_class(lavapipe()));
    FAIL() << "a launch over the loop budget was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[vulkan:norm] a launch of the rows"), std::string::npos) << m;  // or its subgroup variant
    EXPECT_NE(m.find("kernel plans 35"), std::string::npos) << m;  // 3 passes of 11,719 steps and more
    EXPECT_NE(m.find("above the device's budget of 32768"), std::string::npos) << m;
  }
  // The same program on a device class with the default budget is accepted.
  vk::DeviceClass gpu = vk::device_class(lavapipe());
  gpu.loop_budget = vk::kDefaultLoopBudget;
  EXPECT_NO_THROW(vk::lower_program(p, gpu));
}

// A workgroup declaring more shared memory than the device has is refused, naming the op, the
// kernel and the sizes: the rows kernel's reductions keep 1 KiB per workgroup.
TEST(VulkanLimits, SharedMemoryBeyondTheDeviceIsRefused) {
  Graph g;
  Tensor x = g.input("x", {64, 1000});
  g.output("y", layer_norm(x, {}, {}));
  const Program p = plan_for_lavapipe(g);
  vk::DeviceClass small = vk::device_class(lavapipe());
  EXPECT_NO_THROW(vk::lower_program(p, small));
  small.max_shared_memory = 512;
  try {
    vk::lower_program(p, small);
    FAIL() << "a workgroup beyond the device's shared memory was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[vulkan:norm]"), std::string::npos) << m;
    EXPECT_NE(m.find("declares 1024 bytes of shared memory, above the device's limit of 512"), std::string::npos) << m;
  }
}

// plan_vulkan_program (what `meganeura program --json` reports) lists, per dispatch, the
// launches lower_program makes, with their planned loop iterations, and reports a launch over
// the budget instead of refusing it.
TEST(VulkanLoopBudget, PlanReportsEveryDispatchsLaunches) {
  Graph g;
  Tensor x = g.input("x", {1, 3000000});
  Tensor w = g.input("w", {1, 3000000});
  g.output("y", layer_norm(x, {}, {}) * w);
  g.output("s", sum(exp(w)));
  const Program p = plan_for_lavapipe(g);
  const VulkanProgramPlan plan = plan_vulkan_program(p, lavapipe());
  EXPECT_EQ(plan.loop_budget, 32768u);
  EXPECT_EQ(plan.device, lavapipe().name);
  ASSERT_EQ(plan.dispatches.size(), p.dispatches.size());
  const std::vector<vk::Launch> launches = vk::plan_launches(p, vk::device_class(lavapipe()));
  size_t n = 0, over = 0;
  for (size_t i = 0; i < plan.dispatches.size(); ++i) {
    for (const VulkanLaunchPlan& l : plan.dispatches[i]) {
      ASSERT_LT(n, launches.size());
      EXPECT_EQ(launches[n].dispatch, i);
      EXPECT_EQ(l.kernel, vk::kernel_name(launches[n].kernel));
      EXPECT_EQ(l.loop_iterations, launches[n].loop_iterations);
      EXPECT_NE(l.loop_iterations, vk::Launch::kUnplanned) << l.kernel;
      over += l.loop_iterations > plan.loop_budget;
      ++n;
    }
  }
  EXPECT_EQ(n, launches.size());
  EXPECT_EQ(over, 1u);  // the layer norm's row of 3,000,000
}

// glslang writes no Aliased decoration, yet the lowering binds one buffer to several bindings
// (in-place outputs, unused slots): every storage buffer of every kernel is declared Aliased.
TEST(VulkanKernels, EveryStorageBufferIsDeclaredAliased) {
  constexpr uint32_t kOpVariable = 59, kOpDecorate = 71, kStorageBuffer = 12, kAliased = 20;
  for (size_t k = 0; k < vk::kKernelCount; ++k) {
    const std::span<const uint32_t> words = vk::kernel_spirv(vk::Kernel(k));
    ASSERT_GT(words.size(), 5u);
    std::set<uint32_t> buffers, aliased;
    for (size_t at = 5; at < words.size(); at += words[at] >> 16) {
      ASSERT_NE(words[at] >> 16, 0u);
      const uint32_t op = words[at] & 0xffffu;
      if (op == kOpVariable && words[at + 3] == kStorageBuffer) buffers.insert(words[at + 2]);
      if (op == kOpDecorate && words[at + 2] == kAliased) aliased.insert(words[at + 1]);
    }
    EXPECT_FALSE(buffers.empty()) << vk::kernel_name(vk::Kernel(k));
    EXPECT_EQ(buffers, aliased) << vk::kernel_name(vk::Kernel(k));
  }
  const uint32_t truncated[] = {0x07230203, 0x00010300, 0, 10, 0, (4u << 16) | kOpVariable, 1};
  EXPECT_THROW(vk::with_aliased_buffers(truncated), std::invalid_argument);
}

// Through a session on a real device: the refusal reaches the caller when the program is added.
TEST(VulkanLoopBudget, SessionRefusesWithTheOpNamed) {
  MEGANEURA_REQUIRE_VULKAN();
  Graph g;
  Tensor x = g.input("x", {1, 3000000});
  g.output("y", layer_norm(x, {}, {}));
  Session s(testing_vulkan::vulkan_options());
  if (s.backend().device_name().find("(cpu)") == std::string::npos) {
    GTEST_SKIP() << "skipped: the device is not CPU-emulated, its budget is the default";
  }
  try {
    s.add(g);
    FAIL() << "a launch over the loop budget was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("[vulkan:norm]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meganeura
