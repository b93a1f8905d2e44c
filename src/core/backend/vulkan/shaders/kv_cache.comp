#version 450
// The key/value cache ops (ops/kv_cache.cpp), the position read from its i32 buffer at run
// time: the cache write (COPY: the whole cache into the output when it is not the cache's own
// memory; ROWS: the new rows at pos..pos+S-1), attention of query rows at pos..pos+S-1 over the
// cache prefix (ATTEND: a row per invocation, an online softmax over its keys, in chunks of
// cache positions [FIRST, LAST), one launch each, so that no invocation passes the loop
// budget: a row's running maximum and sum pass between launches through the workspace, its
// unnormalised output through the output), and rope at pos (ROPE). A position outside the cache writes nothing and attends to nothing (its rows come
// out NaN): the backend refuses such a position before it runs a program whose position is an
// input, so this is the guard for a position computed on the device. The position buffer holds
// one position for all the sequences or one per sequence; -1 marks an idle sequence, whose rows
// are not written and whose attention output is zero.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };   // cache, q or x
layout(std430, binding = 1) readonly buffer K { float k[]; };   // new rows or the key cache
layout(std430, binding = 2) readonly buffer V { float v[]; };   // the value cache
layout(std430, binding = 3) readonly buffer P { int pos_[]; };  // the positions (every mode)
layout(std430, binding = 5) buffer W { float ws[]; };           // attention chunks: max, sum per row
layout(std430, binding = 8) buffer Y { float y[]; };

// The schedule's push words (schedule.h): write: outer, S, Tmax, D; attention: b, hq, hkv,
// sq, Tmax, d, dv; rope: rows, dim, positions. Then the mode, and per mode: attention's scale
// (f32 bits) and window; rope's log2(theta), sign and scaling (sequence.comp's).
layout(push_constant) uniform Push { uint w[32]; } pc;
const uint MODE = 24, SCALE = 25, WINDOW = 26, THETA_LOG2 = 25, SIGN = 26, FIRST = 27, LAST = 28, FLAGS = 29;
const uint INV_FACTOR = 27, SMOOTH_A = 28, SMOOTH_B = 29;  // rope's scaling
const uint FIRST_CHUNK = 1, LAST_CHUNK = 2;
const uint COPY = 0, ROWS = 1, ATTEND = 2, ROPE = 3;
const uint MAX_HEAD = 128;

// The position of the sequence of leading index o of `outer` (one position for all, or one per
// sequence: word POSITIONS); -1 marks an idle sequence.
const uint POSITIONS = 7;
const int IDLE = -1;
int position_of(uint o, uint outer) {
  const uint n = pc.w[POSITIONS];
  return pos_[n > 1u ? o / (outer / n) : 0u];
}

void write_rows(uint i) {
  const uint outer = pc.w[0], s = pc.w[1], tmax = pc.w[2], d = pc.w[3];
  if (i >= outer * s * d) return;
  const uint o = i / (s * d), r = i % (s * d);
  const int p = position_of(o, outer);
  if (p < 0 || uint(p) + s > tmax) return;
  y[(o * tmax + uint(p)) * d + r] = k[i];
}

void attend(uint r) {
  const uint b = pc.w[0], hq = pc.w[1], hkv = pc.w[2], sq = pc.w[3], tmax = pc.w[4], d = pc.w[5], dv = pc.w[6];
  if (r >= b * hq * sq) return;
  const uint i = r % sq, h = (r / sq) % hq, bi = r / (sq * hq);
  const int p = position_of(bi, b);
  if (p < 0 || uint(p) + sq > tmax) {  // idle: zero; outside the cache: NaN
    const float fill = p == IDLE ? 0.0 : uintBitsToFloat(0x7fc00000u);
    for (uint c = 0; c < dv; ++c) y[r * dv + c] = fill;
    return;
  }
  const uint kvh = bi * hkv + h / (hq / hkv);
  const uint hi = uint(p) + i, window = pc.w[WINDOW];
  const uint lo = window > 0 && hi + 1 > window ? hi + 1 - window : 0;
  const float scale = uintBitsToFloat(pc.w[SCALE]);
  const uint flags = pc.w[FLAGS];
  float acc[MAX_HEAD];
  float mx = LOWEST, sum = 0.0;
  if ((flags & FIRST_CHUNK) != 0) {
    for (uint c = 0; c < dv; ++c) acc[c] = 0.0;
  } else {
    for (uint c = 0; c < dv; ++c) acc[c] = y[r * dv + c];
    mx = ws[2 * r];
    sum = ws[2 * r + 1];
  }
  const uint end = min(hi + 1, pc.w[LAST]);
  for (uint j = max(lo, pc.w[FIRST]); j < end; ++j) {
    float dot = 0.0;
    for (uint c = 0; c < d; ++c) dot += x[r * d + c] * k[(kvh * tmax + j) * d + c];
    const float s = dot * scale, m = max(mx, s);
    const float old = exp(mx - m), e = exp(s - m);
    sum = sum * old + e;
    for (uint c = 0; c < dv; ++c) acc[c] = acc[c] * old + e * v[(kvh * tmax + j) * dv + c];
    mx = m;
  }
  if ((flags & LAST_CHUNK) != 0) {
    for (uint c = 0; c < dv; ++c) y[r * dv + c] = acc[c] / sum;
  } else {
    for (uint c = 0; c < dv; ++c) y[r * dv + c] = acc[c];
    ws[2 * r] = mx;
    ws[2 * r + 1] = sum;
  }
}

void rope(uint i) {
  const uint rows = pc.w[0], dim = pc.w[1], seq = pc.w[2], half_ = dim / 2;
  if (i >= rows * half_) return;
  const uint row = i / half_, q = i % half_;
  const float at = float(max(position_of(row, rows), 0) + int(row % seq));  // idle rotates as 0
  // theta^(-2q/dim) = 2^(-2q/dim * log2(theta))
  float freq = exp2(-2.0 * float(q) / float(dim) * uintBitsToFloat(pc.w[THETA_LOG2]));
  freq *= mix(uintBitsToFloat(pc.w[INV_FACTOR]), 1.0,
              clamp(uintBitsToFloat(pc.w[SMOOTH_A]) * freq - uintBitsToFloat(pc.w[SMOOTH_B]), 0.0, 1.0));
  const float angle = uintBitsToFloat(pc.w[SIGN]) * at * freq;
  const float c = cos(angle), s = sin(angle);
  const uint o = row * dim + q;
  const float x1 = x[o], x2 = x[o + half_];
  y[o] = x1 * c - x2 * s;
  y[o + half_] = x2 * c + x1 * s;
}

void main() {
  const uint i = flat_index(), mode = pc.w[MODE];
  if (mode == COPY) {
    if (i < pc.w[0] * pc.w[2] * pc.w[3]) y[i] = x[i];
  } else if (mode == ROWS) {
    write_rows(i);
  } else if (mode == ATTEND) {
    attend(i);
  } else {
    rope(i);
  }
}
