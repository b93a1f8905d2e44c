// Fused programs compiled into kernels of their own (program_kernel.h): the straight-line GLSL
// a program becomes, malformed programs refused naming the instruction, the compiled kernels'
// SPIR-V (buffers Aliased), and on a device: one pipeline per distinct program, shared by equal
// programs, with results matching the CPU backend's f64 oracle (validation layer on).
//
// Tolerance: 1e-5 * (1 + |f64|): each element is a handful of f32 operations (exp, tanh,
// products of values of order 1), a few ULP each, far from accumulation lengths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/vulkan/lowering.h"
#include "backend/vulkan/pipelines.h"
#include "backend/vulkan/program_kernel.h"
#include "meganeura/passes.h"
#include "meganeura/vulkan.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

using vk::Kernel;

uint32_t word(FusedInstr::Kind kind, Op op, uint32_t index) { return uint32_t(kind) | uint32_t(op) << 8 | index << 16; }
uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// exp(input 0) * input 1 + 2.5, three words per instruction.
std::vector<uint32_t> sample_program() {
  return {word(FusedInstr::input, Op::copy, 0),    0,          0,  // x
          word(FusedInstr::unary, Op::exp, 0),     0,          0,  // exp(x)
          word(FusedInstr::input, Op::copy, 1),    0,          0,  // y
          word(FusedInstr::binary, Op::mul, 0),    0,          0,  // exp(x) * y
          word(FusedInstr::constant, Op::copy, 0), bits(2.5f), 0, word(FusedInstr::binary, Op::add, 0), 0, 0};
}

TEST(VulkanProgramKernel, AProgramBecomesStraightLineCode) {
  const std::string text = vk::program_glsl(sample_program(), false);
  // No interpretation: no loop, no switch, no instruction fetch; every step its own line.
  for (const char* word : {"for", "while", "switch", "code["}) EXPECT_EQ(text.find(word), std::string::npos) << text;
  EXPECT_NE(text.find("program_input(0u, i)"), std::string::npos) << text;
  EXPECT_NE(text.find("op_exp("), std::string::npos) << text;
  EXPECT_NE(text.find("op_mul("), std::string::npos) << text;
  EXPECT_NE(text.find("uintBitsToFloat(0x40200000u)"), std::string::npos) << text;  // 2.5, bit-exact
  // As an epilogue, input 0 is the product the GEMM computed.
  const std::string epi = vk::program_glsl(sample_program(), true);
  EXPECT_EQ(epi.find("program_input(0u"), std::string::npos) << epi;
  EXPECT_NE(epi.find("= product;"), std::string::npos) << epi;
}

TEST(VulkanProgramKernel, MalformedProgramsAreRefusedNamingTheInstruction) {
  auto refused = [](std::vector<uint32_t> p, const std::string& want) {
    try {
      vk::program_glsl(p, false);
      ADD_FAILURE() << "accepted; wanted: " << want;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused({word(FusedInstr::unary, Op::exp, 0), 0, 0}, "instruction 0: the stack is empty");
  refused({word(FusedInstr::input, Op::copy, 0), 0, 0, word(FusedInstr::binary, Op::add, 0), 0, 0},
          "instruction 1: the stack is empty");
  refused({word(FusedInstr::input, Op::copy, 0), 0, 0, word(FusedInstr::unary, Op::matmul, 0), 0, 0},
          "instruction 1: op code");
  refused({word(FusedInstr::load, Op::copy, 1), 0, 0}, "loads output 1 before its store");
  refused({word(FusedInstr::input, Op::copy, 0), 0, 0, word(FusedInstr::input, Op::copy, 1), 0, 0},
          "2 values left on the stack");
  refused({9, 0, 0}, "unknown kind 9");
  refused({word(FusedInstr::input, Op::copy, 0), 0}, "not 3 words per instruction");
}

TEST(VulkanProgramKernel, EachProgramCompilesToItsOwnAliasedKernel) {
  const std::vector<uint32_t> a = vk::program_kernel_spirv(Kernel::fused, sample_program());
  std::vector<uint32_t> other = sample_program();
  other[3] = word(FusedInstr::unary, Op::tanh, 0);
  const std::vector<uint32_t> b = vk::program_kernel_spirv(Kernel::fused, other);
  const std::vector<uint32_t> epi = vk::program_kernel_spirv(Kernel::matmul_fused, sample_program());
  for (const auto* w : {&a, &b, &epi}) {
    ASSERT_GT(w->size(), 5u);
    EXPECT_EQ((*w)[0], 0x07230203u);  // SPIR-V's magic number
    // Already Aliased: decorating again changes nothing.
    EXPECT_EQ(vk::with_aliased_buffers(*w), *w);
  }
  EXPECT_NE(a, b);
  EXPECT_THROW(vk::program_kernel_spirv(Kernel::pointwise, sample_program()), std::logic_error);
}

// x, y of one shape; out = f(x, y) as one fused_elementwise after the rewrite passes.
Graph pointwise_graph(bool tanh_instead) {
  Graph g;
  Tensor x = g.input("x", {4, 257}), y = g.input("y", {4, 257});
  Tensor e = tanh_instead ? tanh(x) : exp(x);
  g.output("out", e * y + 2.5);
  return g;
}

std::vector<double> run(Session& s, size_t program, const std::vector<double>& x, const std::vector<double>& y) {
  s.set("x", x);
  s.set("y", y);
  s.run(program);
  return s.get_f64("out");
}

TEST(VulkanProgramKernel, OnePipelinePerDistinctProgramResultsMatchTheOracle) {
  MEGANEURA_REQUIRE_VULKAN();
  Session gpu(testing_vulkan::vulkan_options());
  Session oracle(SessionOptions{.device = Device::cpu, .seed = 1});
  std::mt19937 rng(3);
  std::vector<double> x(4 * 257), y(x.size());
  for (double& v : x) v = std::uniform_real_distribution<double>(-2, 2)(rng);
  for (double& v : y) v = std::uniform_real_distribution<double>(-1, 1)(rng);
  auto add = [&](bool tanh_instead) {
    const Graph g = pointwise_graph(tanh_instead);
    const Program p = plan(optimize(g, gpu.backend().passes()), PlanOptions{DType::f32, gpu.backend().limits()});
    size_t n = 0;
    for (const Dispatch& d : p.dispatches) n += d.op == Op::fused_elementwise;
    EXPECT_EQ(n, 1u) << "the rewrite passes make one program";
    testing_vulkan::add_f64_oracle(oracle, g);
    return gpu.add(p);
  };
  const size_t p_exp = add(false);
  const size_t after_first = vulkan_pipeline_count(gpu.backend());
  const size_t p_tanh = add(true);  // the same kernel and shapes, another program
  const size_t after_second = vulkan_pipeline_count(gpu.backend());
  EXPECT_GT(after_second, after_first) << "another program compiles its own kernel";
  const size_t p_exp_again = add(false);  // an equal program reuses its pipeline
  EXPECT_EQ(vulkan_pipeline_count(gpu.backend()), after_second);
  const size_t programs[] = {p_exp, p_tanh, p_exp_again};
  for (size_t k = 0; k < 3; ++k) {
    const std::vector<double> got = run(gpu, programs[k], x, y), want = run(oracle, k, x, y);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << "program " << k << " at " << i;
  }
}

}  // namespace
}  // namespace meganeura
