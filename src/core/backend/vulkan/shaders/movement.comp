#version 450
// Strided gathers: y[i] = x[offset(i)] for permute, slice, broadcast_to and pad (zero outside
// [lo, hi) on any axis), and a row copy for one input of a concat. Raw 32-bit words, so any
// 4-byte dtype moves.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };

layout(push_constant) uniform P {
  uint n, rank, concat, pad0;
  int base;
  uint row, out_row, offset;  // concat: input row length, output row length, column offset
  uint shape[6];
  int stride[6];
  uint lo[6];
  uint hi[6];
} pc;

void main() {
  uint i = flat_index();
  if (i >= pc.n) return;
  if (pc.concat != 0) {
    y[(i / pc.row) * pc.out_row + pc.offset + i % pc.row] = x[i];
    return;
  }
  int off = pc.base;
  uint rem = i;
  bool inside = true;
  for (int k = int(pc.rank) - 1; k >= 0; --k) {
    uint idx = rem % pc.shape[k];
    rem /= pc.shape[k];
    inside = inside && idx >= pc.lo[k] && idx < pc.hi[k];
    off += int(idx) * pc.stride[k];
  }
  y[i] = inside ? x[off] : 0u;
}
