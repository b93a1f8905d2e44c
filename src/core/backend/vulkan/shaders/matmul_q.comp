#version 450
// matmul_q (ops/matmul_q.cpp): y[i, j] = sum_c x[i, c] w[j, c] for a weight w [n, k] in a block
// format, one output per invocation, the weight row's blocks decoded as they are read; and
// embedding from a table in a block format: y[i, c] = table[ids[i], c], a value per invocation. Q8_0:
// per 32 values an f16 scale, then 32 signed bytes; Q4_0: an f16 scale, then 16 bytes whose low
// nibbles are entries 0-15 and high nibbles 16-31, each (nibble - 8) * scale. Blocks are 34 and
// 18 bytes: the weight is read as words and every offset in it is even; with BYTES (devices
// with 8-bit storage) byte by byte.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "block_bytes.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer Ids { int ids[]; };  // gathers: the ids there
layout(std430, binding = 8) writeonly buffer Y { float y[]; };

layout(push_constant) uniform P { uint w[32]; } pc;
// The schedule's sizes (schedule.h: push::kMatmul; for gathers push::kIndexRows, kIndexWidth,
// kIndexCount) and the mode (lowering.h, kPushMode): bit 0 Q4_0 (else Q8_0), bit 1 a gather.
const uint ROWS = 16, COLS = 17, DEPTH = 18, TABLE_ROWS = 0, WIDTH = 1, COUNT = 2, MODE = 24;

// Value c of the row starting at byte o.
float value_at(uint o, uint c, bool q8) {
  const uint block = o + (c / 32u) * (q8 ? 34u : 18u), e = c % 32u;
  const float d = half_at(block);
  if (q8) return d * float(int(byte_at(block + 2u + e) << 24) >> 24);
  const uint v = byte_at(block + 2u + e % 16u);
  return d * float(int(e < 16u ? v & 15u : v >> 4) - 8);
}

void gather(uint i, bool q8) {
  const uint width = pc.w[WIDTH];
  if (i >= pc.w[COUNT] * width) return;
  const int id = ids[i / width];
  const uint row_bytes = (width / 32u) * (q8 ? 34u : 18u);
  // An id outside the table gives 0 (the CPU backend names it; a shader cannot).
  y[i] = id < 0 || uint(id) >= pc.w[TABLE_ROWS] ? 0.0 : value_at(uint(id) * row_bytes, i % width, q8);
}

void main() {
  const bool q8 = (pc.w[MODE] & 1u) == 0u;
  if ((pc.w[MODE] & 2u) != 0u) {
    gather(flat_index(), q8);
    return;
  }
  const uint i = flat_index(), m = pc.w[ROWS], n = pc.w[COLS], k = pc.w[DEPTH];
  if (i >= m * n) return;
  const uint row = i / n, col = i % n, blocks = k / 32u;
  const uint block_bytes = q8 ? 34u : 18u;
  uint o = col * blocks * block_bytes, xi = row * k;
  float acc = 0.0;
  for (uint b = 0u; b < blocks; ++b, o += block_bytes, xi += 32u) {
    float s = 0.0;
    if (q8) {
      [[unroll]] for (uint c = 0u; c < 32u; ++c) s += float(int(byte_at(o + 2u + c) << 24) >> 24) * x[xi + c];
    } else {
      [[unroll]] for (uint c = 0u; c < 16u; ++c) {
        const uint v = byte_at(o + 2u + c);
        s += float(int(v & 15u) - 8) * x[xi + c] + float(int(v >> 4) - 8) * x[xi + 16u + c];
      }
    }
    acc += half_at(o) * s;
  }
  y[i] = acc;
}
