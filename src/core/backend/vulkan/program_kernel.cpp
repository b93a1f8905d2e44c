#include "backend/vulkan/program_kernel.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string_view>

#include "backend/vulkan/glsl_compiler.h"
#include "backend/vulkan/glsl_ops.h"
#include "graph/op_table.h"

namespace meganeura::vk {
namespace {

// The kernels' GLSL, embedded at build time (embed_sources.cmake).
const std::map<std::string_view, std::string_view>& sources() {
  static const std::map<std::string_view, std::string_view> m = {
#include "shader_sources.inc"
  };
  return m;
}

std::string literal(uint32_t bits) {
  char text[32];
  std::snprintf(text, sizeof text, "uintBitsToFloat(0x%08xu)", bits);
  return text;
}

Op elementwise_op(uint32_t code, bool unary, size_t at) {
  const bool known =
      code < kOpCount && (unary ? op_info(Op(code)).elementwise.unary() : op_info(Op(code)).elementwise.binary());
  if (!known) {
    throw std::invalid_argument("fused program instruction " + std::to_string(at) + ": op code " +
                                std::to_string(code) + " is not a " + (unary ? "unary" : "binary") + " elementwise op");
  }
  return Op(code);
}

// `text` with each `#include "name"` line replaced by that source (the program for
// fused_program.glsl, the generated op functions for ops_generated.glsl), recursively.
std::string expand(std::string_view text, const std::string& program, int depth = 0) {
  if (depth > 8) throw std::logic_error("kernel sources include each other");
  std::string out;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end == std::string_view::npos ? text.size() : end + 1);
    text.remove_prefix(line.size());
    constexpr std::string_view kInclude = "#include \"";
    if (!line.starts_with(kInclude)) {
      out += line;
      continue;
    }
    const std::string name(line.substr(kInclude.size(), line.find('"', kInclude.size()) - kInclude.size()));
    if (name == "fused_program.glsl") {
      out += program;
    } else if (name == "ops_generated.glsl") {
      static const std::string ops = glsl_ops_source();
      out += ops;
    } else if (auto it = sources().find(name); it != sources().end()) {
      out += expand(it->second, program, depth + 1);
    } else {
      throw std::logic_error("kernel source " + name + " is not embedded");
    }
  }
  return out;
}

}  // namespace

std::string program_glsl(std::span<const uint32_t> program, bool product_input) {
  if (program.size() % 3) throw std::invalid_argument("fused program: not 3 words per instruction");
  std::vector<std::string> stack;
  std::string body, stored[kFusedMaxOutputs];
  bool stores = false;
  size_t temps = 0;
  auto push = [&](const std::string& expr) {
    const std::string name = "t" + std::to_string(temps++);
    body += "  const float " + name + " = " + expr + ";\n";
    stack.push_back(name);
  };
  for (size_t at = 0; at < program.size() / 3; ++at) {
    const uint32_t word = program[3 * at], kind = word & 0xffu, code = (word >> 8) & 0xffu, k = word >> 16;
    const uint32_t a = program[3 * at + 1], b = program[3 * at + 2];
    const size_t needs = kind == FusedInstr::unary || kind == FusedInstr::store ? 1
                         : kind == FusedInstr::binary                           ? 2
                                                                                : 0;
    if (stack.size() < needs)
      throw std::invalid_argument("fused program instruction " + std::to_string(at) + ": the stack is empty");
    const bool output = kind == FusedInstr::store || kind == FusedInstr::load;
    if (output && k >= kFusedMaxOutputs)
      throw std::invalid_argument("fused program instruction " + std::to_string(at) + ": output " + std::to_string(k));
    if (kind == FusedInstr::input) {
      push(product_input && k == 0 ? std::string("product") : "program_input(" + std::to_string(k) + "u, i)");
    } else if (kind == FusedInstr::constant) {
      push(literal(a));
    } else if (kind == FusedInstr::unary) {
      const std::string x = stack.back();
      stack.pop_back();
      push(glsl_op_function(elementwise_op(code, true, at)) + "(" + x + ", " + literal(a) + ", " + literal(b) + ")");
    } else if (kind == FusedInstr::binary) {
      const std::string y = stack.back();
      stack.pop_back();
      const std::string x = stack.back();
      stack.pop_back();
      push(glsl_op_function(elementwise_op(code, false, at)) + "(" + x + ", " + y + ")");
    } else if (kind == FusedInstr::store) {
      stored[k] = stack.back();
      stack.pop_back();
      body += "  outv[" + std::to_string(k) + "] = " + stored[k] + ";\n";
      stores = true;
    } else if (kind == FusedInstr::load) {
      if (stored[k].empty())
        throw std::invalid_argument("fused program instruction " + std::to_string(at) + ": loads output " +
                                    std::to_string(k) + " before its store");
      stack.push_back(stored[k]);
    } else {
      throw std::invalid_argument("fused program instruction " + std::to_string(at) + ": unknown kind " +
                                  std::to_string(kind));
    }
  }
  if (stores ? !stack.empty() : stack.size() != 1)
    throw std::invalid_argument("fused program: " + std::to_string(stack.size()) + " values left on the stack");
  return "float program(uint i, float product) {\n" + body + "  return " + (stores ? "outv[0]" : stack.back()) +
         ";\n}\n";
}

std::vector<uint32_t> program_kernel_spirv(Kernel k, std::span<const uint32_t> program) {
  if (!runs_program(k)) throw std::logic_error(std::string("the ") + kernel_name(k) + " kernel runs no fused program");
  const std::string text = program_glsl(program, k == Kernel::matmul_fused);
  std::string source = expand(sources().at(k == Kernel::fused ? "fused.comp" : "matmul.comp"), text);
  if (k == Kernel::matmul_fused) source.insert(source.find('\n') + 1, "#define EPILOGUE\n");  // after #version
  try {
    return with_aliased_buffers(compile_glsl_compute(source));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string(e.what()) + "\nin the " + kernel_name(k) + " kernel of the program:\n" + text);
  }
}

}  // namespace meganeura::vk
