// Writes the program the C API test runs, as a deployed program would be written: planned from a
// graph and saved as JSON (Program::to_json, what `meganeura program --json` prints).
//   y = relu(x W + b), x: input f32[8, 16], W: parameter f32[16, 12], b: parameter f32[12].
// Planned for buffers of at most 128 MiB at 256-byte alignment, so that both the CPU backend and
// any Vulkan device (lavapipe's binding limit is 128 MiB) accept it.
#include <cstdio>
#include <fstream>

#include "meganeura/program.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.json\n", argv[0]);
    return 2;
  }
  using namespace meganeura;
  Graph g;
  Tensor x = g.input("x", {8, 16});
  Tensor w = g.parameter("w", {16, 12}, Init{Init::normal, 0.5});
  Tensor b = g.parameter("b", {12}, Init{Init::zeros});
  g.output("y", relu(matmul(x, w) + b));
  PlanOptions po;
  po.limits.max_binding_bytes = po.limits.max_allocation_bytes = uint64_t(128) << 20;
  po.limits.offset_alignment = 256;
  std::ofstream out(argv[1], std::ios::binary);
  out << plan(g, po).to_json();
  out.close();
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", argv[1]);
    return 1;
  }
  return 0;
}
