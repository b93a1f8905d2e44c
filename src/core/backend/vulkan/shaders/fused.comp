#version 450
// The fused ops' programs (fused_elementwise, fused_reduce): one kernel per program, compiled
// by the backend with the program as straight-line GLSL (program_kernel.cpp writes
// fused_program.glsl), over the schedule's collapsed broadcast layout (schedule.h,
// ElementwiseLayout). Elementwise: one
// invocation per output element. Reduce: one workgroup per output, each invocation walks a
// strided share of the reduced axis with a compensated sum, then a tree over the workgroup;
// short axes over many outputs: one invocation per output, a compensated serial sum. Long
// axes split into CHUNKS pieces: a workgroup per (output, piece) writes its partial result to
// the workspace, then a workgroup per output combines the pieces with a tree.
#include "common.glsl"
#include "half.glsl"
#include "ops.glsl"

layout(std430, binding = 0) buffer I0 { float v[]; } i0;
layout(std430, binding = 1) buffer I1 { float v[]; } i1;
layout(std430, binding = 2) buffer I2 { float v[]; } i2;
layout(std430, binding = 3) buffer I3 { float v[]; } i3;
layout(std430, binding = 4) buffer I4 { float v[]; } i4;
layout(std430, binding = 5) buffer I5 { float v[]; } i5;
layout(std430, binding = 6) buffer I6 { float v[]; } i6;
layout(std430, binding = 7) buffer I7 { float v[]; } i7;
layout(std430, binding = 8) buffer Y { float y[]; };
// Outputs 1 and 2 of a multi-output elementwise program (its `store` instructions).
layout(std430, binding = 10) buffer Y1 { float y1[]; };
layout(std430, binding = 11) buffer Y2 { float y2[]; };
#define ws y1  // a reduction's partial results (the workspace; reductions have one output)
// A program ending in a rounding (round_f16, round_bf16) whose output is stored in 16 bits.
layout(std430, binding = 8) buffer YH { uint yh[]; };

// Word indices: the schedule's layout (0-23), then the backend's (24-).
const uint NUMEL = 0, RANK = 1, EXTENTS = 2, MASKS = 8, INPUTS = 10;
const uint REDUCE_OUTER = 11, REDUCE_LEN = 12, REDUCE_INNER = 13, REDUCE_KIND = 14;
const uint MODE = 24, OUTPUTS = 28, CHUNKS = 29, SPAN = 30;
const uint ELEMENTWISE = 0, REDUCE = 1, REDUCE_SERIAL = 2, REDUCE_PARTIAL = 3, REDUCE_COMBINE = 4;
// Elementwise into 16-bit storage: an invocation evaluates two elements and writes one word.
const uint ELEMENTWISE_F16 = 5, ELEMENTWISE_BF16 = 6;

layout(push_constant) uniform P { uint w[32]; } pc;
// The launch's mode (push word MODE) as a constant: each pipeline holds only its own mode's code.
layout(constant_id = 1) const uint LAUNCH_MODE = 0;

#include "broadcast.glsl"

float load(uint input_, uint i) {
  switch (input_) {
    case 0: return i0.v[i];
    case 1: return i1.v[i];
    case 2: return i2.v[i];
    case 3: return i3.v[i];
    case 4: return i4.v[i];
    case 5: return i5.v[i];
    case 6: return i6.v[i];
    default: return i7.v[i];
  }
}

// The values a multi-output program stores for the element being evaluated (`outv[k] = ...`
// in its text); a program without stores returns its one result.
float outv[3];
float program_input(uint k, uint i) { return load(k, offset_of(k, i)); }

#include "fused_program.glsl"

float evaluate(uint i) {
  outv[0] = program(i, 0.0);
  return outv[0];
}

shared float partial[256];

// The workgroup's tree over each invocation's value (sum, or max when is_max).
float tree(float v, bool is_max, uint lid, uint wg) {
  partial[lid] = v;
  barrier();
  for (uint s = wg / 2; s > 0; s >>= 1) {
    if (lid < s) partial[lid] = is_max ? max(partial[lid], partial[lid + s]) : partial[lid] + partial[lid + s];
    barrier();
  }
  return partial[0];
}

void main() {
  const uint mode = LAUNCH_MODE;
  if (mode == ELEMENTWISE) {
    uint i = flat_index();
    if (i >= pc.w[NUMEL]) return;
    // every input of element i is read before any output is written: outputs may alias inputs
    y[i] = evaluate(i);
    if (pc.w[OUTPUTS] > 1u) y1[i] = outv[1];
    if (pc.w[OUTPUTS] > 2u) y2[i] = outv[2];
    return;
  }
  if (mode == ELEMENTWISE_F16 || mode == ELEMENTWISE_BF16) {
    const uint j = flat_index(), i = 2 * j, n = pc.w[NUMEL];
    if (i >= n) return;
    const float lo = evaluate(i), hi = i + 1 < n ? evaluate(i + 1) : 0.0;  // exact in the format
    yh[j] = mode == ELEMENTWISE_F16 ? f16_bits(lo) | (f16_bits(hi) << 16) : bf16_bits(lo) | (bf16_bits(hi) << 16);
    return;
  }
  const bool serial = mode == REDUCE_SERIAL;
  uint g = serial ? flat_index() : flat_group(), lid = serial ? 0 : gl_LocalInvocationID.x, wg = serial ? 1 : gl_WorkGroupSize.x;
  uint outer = pc.w[REDUCE_OUTER], len = pc.w[REDUCE_LEN], inner = pc.w[REDUCE_INNER], kind = pc.w[REDUCE_KIND];
  const bool is_max = kind == 2u;
  const uint chunks = mode == REDUCE_PARTIAL || mode == REDUCE_COMBINE ? pc.w[CHUNKS] : 1u;
  const uint r = mode == REDUCE_COMBINE ? g : g / chunks, piece = g % chunks;  // COMBINE: a workgroup per output
  if (r >= outer * inner) return;  // uniform over the workgroup
  if (mode == REDUCE_COMBINE) {
    float v = is_max ? LOWEST : 0.0;
    for (uint c = lid; c < chunks; c += wg) v = is_max ? max(v, ws[r * chunks + c]) : v + ws[r * chunks + c];
    v = tree(v, is_max, lid, wg);
    if (lid == 0) y[r] = kind == 1u ? v / float(len) : v;
    return;
  }
  uint base = (r / inner) * len * inner + r % inner;
  const uint first = mode == REDUCE_PARTIAL ? piece * pc.w[SPAN] : 0u;
  const uint last = mode == REDUCE_PARTIAL ? min(len, first + pc.w[SPAN]) : len;
  precise float acc = is_max ? LOWEST : 0.0, comp = 0.0;
  for (uint j = first + lid; j < last; j += wg) {
    float v = evaluate(base + j * inner);
    if (is_max) {
      acc = max(acc, v);
    } else {  // Kahan: the error stays bounded however long the axis
      precise float t = v - comp, s = acc + t;
      comp = (s - acc) - t;
      acc = s;
    }
  }
  if (serial) {
    y[r] = kind == 1u ? acc / float(len) : acc;
    return;
  }
  acc = tree(acc, is_max, lid, wg);
  if (lid != 0) return;
  if (mode == REDUCE_PARTIAL)
    ws[g] = acc;
  else
    y[r] = kind == 1u ? acc / float(len) : acc;
}
