#version 450
// Embedding gather, its gradient and one-hot. The gradient is atomics-free and deterministic,
// in launches over chunks of the ids (after one that zeroes the table): an invocation per
// (id in the chunk, column) whose id does not occur earlier in the chunk sums the chunk's rows
// of that id in order and adds the sum to the table row, so no invocation walks more than one
// chunk and each table element has one writer per launch.
#include "common.glsl"
#include "half.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer XH { uint xh[]; };  // an embedding table in 16 bits
layout(std430, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, binding = 2) buffer Y { float y[]; };

const uint EMBEDDING = 0, EMBEDDING_BACKWARD = 1, ONE_HOT = 2, ZERO = 3;

layout(push_constant) uniform P {
  uint n, op, rows, dim;  // n: invocations; one_hot: dim = classes
  uint count;             // number of ids
  int ignore_index;
  uint first, last;       // embedding backward: the chunk of ids [first, last)
  uint format;            // embedding: the table's HALF_ format
} pc;

void main() {
  uint i = flat_index();
  if (i >= pc.n) return;
  if (pc.op == EMBEDDING) {
    uint p = i / pc.dim;
    int id = ids[p];
    // Out-of-range ids read as zeros rather than out of bounds.
    if (id < 0 || uint(id) >= pc.rows) {
      y[i] = 0.0;
    } else {
      const uint e = uint(id) * pc.dim + i % pc.dim;
      y[i] = pc.format == HALF_F32 ? x[e] : half_value(xh[e / 2u], e, pc.format);
    }
  } else if (pc.op == EMBEDDING_BACKWARD) {
    uint p = pc.first + i / pc.dim, j = i % pc.dim;
    int id = ids[p];
    if (id < 0 || uint(id) >= pc.rows) return;  // matches no table row
    for (uint q = pc.first; q < p; ++q) {
      if (ids[q] == id) return;  // an earlier occurrence in the chunk sums this row
    }
    float s = 0.0;
    for (uint q = p; q < pc.last; ++q) {
      if (ids[q] == id) s += x[q * pc.dim + j];
    }
    y[uint(id) * pc.dim + j] += s;
  } else if (pc.op == ZERO) {
    y[i] = 0.0;
  } else {
    uint p = i / pc.dim;
    int id = ids[p];
    y[i] = (id != pc.ignore_index && id == int(i % pc.dim)) ? 1.0 : 0.0;
  }
}
