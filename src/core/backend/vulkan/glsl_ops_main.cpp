// Writes ops_generated.glsl: the op codes and the elementwise op functions the Vulkan kernels
// call, from the op declarations (src/core/ops/), so the shaders and the lowering can never
// disagree on a code and an elementwise op cannot be missing from the GPU.
//
//   const uint OP_<NAME> = <Op value>;   for every op
//   float op_<name>(float x, float p0, float p1) / float op_<name>(float a, float b)
//   float unary_op(uint op, float x, float p0, float p1) and float binary_op(uint op, float a, float b)
//
// Usage: meganeura_glsl_ops OUTPUT. The file is rewritten only when its text changes.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "backend/vulkan/glsl_ops.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: meganeura_glsl_ops OUTPUT.glsl\n";
    return 2;
  }
  const std::string text = meganeura::vk::glsl_ops_source();
  {
    std::ifstream old(argv[1], std::ios::binary);
    std::stringstream current;
    current << old.rdbuf();
    if (old && current.str() == text) return 0;
  }
  std::ofstream out(argv[1], std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    std::cerr << "meganeura_glsl_ops: cannot write " << argv[1] << "\n";
    return 1;
  }
  return 0;
}
