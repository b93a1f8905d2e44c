#version 450
// Embedding gather, its gradient and one-hot. The gradient is atomics-free and deterministic:
// one invocation per (table row, column) scans the ids in order, matching a sequential
// scatter-add's summation order.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };

const uint EMBEDDING = 0, EMBEDDING_BACKWARD = 1, ONE_HOT = 2;

layout(push_constant) uniform P {
  uint n, op, rows, dim;  // n: outputs; one_hot: dim = classes
  uint count;             // number of ids
  int ignore_index;
} pc;

void main() {
  uint i = flat_index();
  if (i >= pc.n) return;
  if (pc.op == EMBEDDING) {
    uint p = i / pc.dim;
    int id = ids[p];
    // Out-of-range ids read as zeros rather than out of bounds.
    y[i] = (id >= 0 && uint(id) < pc.rows) ? x[uint(id) * pc.dim + i % pc.dim] : 0.0;
  } else if (pc.op == EMBEDDING_BACKWARD) {
    uint r = i / pc.dim, j = i % pc.dim;
    float s = 0.0;
    for (uint p = 0; p < pc.count; ++p) {
      if (ids[p] == int(r)) s += x[p * pc.dim + j];
    }
    y[i] = s;
  } else {
    uint p = i / pc.dim;
    int id = ids[p];
    y[i] = (id != pc.ignore_index && id == int(i % pc.dim)) ? 1.0 : 0.0;
  }
}
