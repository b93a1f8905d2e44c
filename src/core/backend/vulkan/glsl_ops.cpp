#include "backend/vulkan/glsl_ops.h"

#include <cctype>

#include "graph/op_table.h"

namespace meganeura::vk {
namespace {

std::string upper(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(std::toupper(static_cast<unsigned char>(c)));
  return r;
}

// An expression becomes `return (expr);`; statements ending in `return ...;` stay as they are.
std::string body(std::string_view glsl) {
  const std::string s(glsl);
  if (s.find("return") != std::string::npos) return "  " + s + "\n";
  return "  return " + s + ";\n";
}

std::string functions() {
  std::string out;
  for (const OpInfo& info : op_table()) {
    const ops::Elementwise& e = info.elementwise;
    if (e.unary())
      out += "float " + glsl_op_function(info.op) + "(float x, float p0, float p1) {\n" + body(e.glsl) + "}\n";
    if (e.binary()) out += "float " + glsl_op_function(info.op) + "(float a, float b) {\n" + body(e.glsl) + "}\n";
  }
  return out;
}

std::string dispatchers() {
  std::string unary = "float unary_op(uint op, float x, float p0, float p1) {\n  switch (op) {\n";
  std::string binary = "float binary_op(uint op, float a, float b) {\n  switch (op) {\n";
  for (const OpInfo& info : op_table()) {
    const std::string code = "OP_" + upper(info.name);
    if (info.elementwise.unary())
      unary += "    case " + code + ": return " + glsl_op_function(info.op) + "(x, p0, p1);\n";
    if (info.elementwise.binary()) binary += "    case " + code + ": return " + glsl_op_function(info.op) + "(a, b);\n";
  }
  return unary + "  }\n  return x;\n}\n\n" + binary + "  }\n  return a;\n}\n";
}

}  // namespace

std::string glsl_op_function(Op op) { return "op_" + std::string(op_name(op)); }

std::string glsl_ops_source() {
  std::string out =
      "// Generated from the op declarations (src/core/ops/) by meganeura_glsl_ops: do not edit.\n"
      "// Needs ops.glsl's helpers (erf_approx, stable_tanh and the constants) defined first.\n";
  for (const OpInfo& info : op_table())
    out += "const uint OP_" + upper(info.name) + " = " + std::to_string(uint32_t(info.op)) + "u;\n";
  out += "const uint OP_F32_TO_I32 = " + std::to_string(kGlslF32ToI32) +
         "u, OP_I32_TO_F32 = " + std::to_string(kGlslI32ToF32) + "u;\n\n";
  return out + functions() + "\n" + dispatchers();
}

}  // namespace meganeura::vk
