#version 450
// where, gather along an axis and its scatter-add, and the fused token cross-entropy with its
// backward (softmax - target, never a one-hot or a [tokens, classes] copy beyond the gradient
// itself). Push words 0-10 are the schedule's (schedule.h: ElementwiseLayout for where,
// push::kIndexRows... for the others); the backend adds the mode, the ignored target id and
// the scatter-add's chunk of indices. The scatter-add runs as the embedding gradient does
// (index.comp): a launch zeroes the output, then one per chunk of indices adds each index's
// rows of the chunk, summed in order by the invocation of its first occurrence.
// Ids arrive as the bits of i32 values in float buffers. A kernel cannot throw: an id out of
// range gathers zeros (as the embedding kernel does) and makes a cross-entropy row NaN, so
// the error shows in the loss instead of reading out of bounds.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer I0 { float in0[]; };  // cond, x, dy or logits
layout(std430, binding = 1) readonly buffer I1 { float in1[]; };  // a, or ids / targets
layout(std430, binding = 2) readonly buffer I2 { float in2[]; };  // b, or the upstream gradient
layout(std430, binding = 3) buffer W { float ws[]; };             // per-row losses or the count
layout(std430, binding = 8) buffer Y { float y[]; };

const uint NUMEL = 0, RANK = 1, EXTENTS = 2, MASKS = 8;   // where
const uint ROWS = 0, WIDTH = 1, COUNT = 2, AXIS = 3;      // gather; cross-entropy: rows, classes
const uint MODE = 24, IGNORE = 25, FIRST = 26, LAST = 27;
const uint WHERE = 0, GATHER = 1, GATHER_BACKWARD = 2, CE_ROWS = 3, CE_TOTAL = 4, CE_BACKWARD = 5, ZERO = 6,
           CE_COUNT = 7;

layout(push_constant) uniform P { uint w[32]; } pc;

#include "broadcast.glsl"
#include "group.glsl"

int id_at(uint j) { return floatBitsToInt(in1[j]); }
bool ignored(int t) { return t == int(pc.w[IGNORE]); }
float nan_() { return uintBitsToFloat(0x7fc00000u); }

// max and log-sum-exp of logits row r, over the workgroup.
float row_lse(uint base, uint c) {
  uint lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  float m = LOWEST;
  for (uint j = lid; j < c; j += wg) m = max(m, in0[base + j]);
  m = group_max(m);
  float s = 0.0;
  for (uint j = lid; j < c; j += wg) s += exp(in0[base + j] - m);
  return m + log(group_sum(s));
}

void main() {
  const uint mode = pc.w[MODE];
  if (mode == WHERE) {
    uint i = flat_index();
    if (i >= pc.w[NUMEL]) return;
    y[i] = in0[offset_of(0, i)] != 0.0 ? in1[offset_of(1, i)] : in2[offset_of(2, i)];
  } else if (mode == GATHER) {
    uint outer = pc.w[ROWS], inner = pc.w[WIDTH], n = pc.w[COUNT], size = pc.w[AXIS];
    uint i = flat_index();
    if (i >= outer * n * inner) return;
    uint c = i % inner, j = (i / inner) % n, o = i / (inner * n);
    int id = id_at(j);
    y[i] = id >= 0 && uint(id) < size ? in0[(o * size + uint(id)) * inner + c] : 0.0;
  } else if (mode == GATHER_BACKWARD) {  // one chunk [FIRST, LAST) of the indices
    uint outer = pc.w[ROWS], inner = pc.w[WIDTH], size = pc.w[AXIS], first = pc.w[FIRST], last = pc.w[LAST];
    uint i = flat_index(), span = last - first;
    if (i >= outer * span * inner) return;
    uint c = i % inner, j = first + (i / inner) % span, o = i / (inner * span), n = pc.w[COUNT];
    int id = id_at(j);
    if (id < 0 || uint(id) >= size) return;
    for (uint q = first; q < j; ++q) {
      if (id_at(q) == id) return;  // an earlier occurrence sums this row
    }
    float acc = 0.0;
    for (uint q = j; q < last; ++q) {
      if (id_at(q) == id) acc += in0[(o * n + q) * inner + c];
    }
    y[(o * size + uint(id)) * inner + c] += acc;
  } else if (mode == ZERO) {
    uint i = flat_index();
    if (i < pc.w[NUMEL]) y[i] = 0.0;
  } else if (mode == CE_ROWS) {  // a workgroup per row: its loss into the workspace
    uint r = flat_group(), rows = pc.w[ROWS], c = pc.w[WIDTH];
    if (r >= rows) return;  // uniform over the workgroup
    int t = id_at(r);
    if (ignored(t)) {
      if (gl_LocalInvocationID.x == 0) ws[r] = 0.0;
      return;
    }
    float lse = row_lse(r * c, c);
    if (gl_LocalInvocationID.x == 0) ws[r] = t >= 0 && uint(t) < c ? lse - in0[r * c + uint(t)] : nan_();
  } else if (mode == CE_TOTAL) {  // one workgroup: the mean over the rows that count
    uint rows = pc.w[ROWS], lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    float loss = 0.0, count = 0.0;
    for (uint r = lid; r < rows; r += wg) {
      if (ignored(id_at(r))) continue;
      loss += ws[r];
      count += 1.0;
    }
    loss = group_sum(loss);
    count = group_sum(count);
    if (lid == 0) y[0] = count > 0.0 ? loss / count : 0.0;
  } else if (mode == CE_COUNT) {  // one workgroup: the rows that count, for the backward
    uint rows = pc.w[ROWS], lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    float count = 0.0;  // exact: a count below 2^24
    for (uint r = lid; r < rows; r += wg) count += ignored(id_at(r)) ? 0.0 : 1.0;
    count = group_sum(count);
    if (lid == 0) ws[0] = count;
  } else {  // CE_BACKWARD: a workgroup per row, (softmax - target) * g / count
    uint r = flat_group(), rows = pc.w[ROWS], c = pc.w[WIDTH], lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    if (r >= rows) return;
    const float count = ws[0];
    const float scale = count > 0.0 ? in2[0] / count : 0.0;
    int t = id_at(r);
    uint base = r * c;
    if (ignored(t)) {
      for (uint j = lid; j < c; j += wg) y[base + j] = 0.0;
      return;
    }
    float lse = row_lse(base, c);
    bool valid = t >= 0 && uint(t) < c;
    for (uint j = lid; j < c; j += wg) {
      float v = scale * exp(in0[base + j] - lse) - (int(j) == t ? scale : 0.0);
      y[base + j] = valid ? v : nan_();
    }
  }
}
