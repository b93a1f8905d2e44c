#version 450
// Max and average pooling with their gradients, and nearest 2x upsampling. Gradients gather:
// one invocation per input element visits only the windows that contain it (at most
// ceil(kh / sy) x ceil(kw / sx)), in row-major order; no atomics, no saved argmax.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer A { float a[]; };  // x, or dy for avg backward
layout(std430, binding = 1) readonly buffer B { float b[]; };  // max backward: dy
layout(std430, binding = 2) writeonly buffer Y { float y[]; };

const uint MAX = 0, MAX_BACKWARD = 1, AVG = 2, AVG_BACKWARD = 3, UPSAMPLE = 4;

layout(push_constant) uniform P {
  uint total, op, h, w, oh, ow, kh, kw;
  int sy, sx, py, px;
} pc;

// First maximum of window (oy, ox) in plane p in row-major order, as a flat index (or -1).
int window_argmax(uint p, uint oy, uint ox) {
  int y0 = int(oy) * pc.sy - pc.py, x0 = int(ox) * pc.sx - pc.px;
  float best = 0.0;
  int arg = -1;
  for (int i = max(y0, 0); i < min(y0 + int(pc.kh), int(pc.h)); ++i)
    for (int j = max(x0, 0); j < min(x0 + int(pc.kw), int(pc.w)); ++j) {
      int idx = (int(p) * int(pc.h) + i) * int(pc.w) + j;
      if (arg < 0 || a[idx] > best) { best = a[idx]; arg = idx; }
    }
  return arg;
}

void main() {
  uint e = flat_index();
  if (e >= pc.total) return;
  if (pc.op == UPSAMPLE) {
    uint j = e % (2 * pc.w), i = (e / (2 * pc.w)) % (2 * pc.h), p = e / (4 * pc.w * pc.h);
    y[e] = a[(p * pc.h + i / 2) * pc.w + j / 2];
    return;
  }
  if (pc.op == MAX || pc.op == AVG) {
    uint ox = e % pc.ow, oy = (e / pc.ow) % pc.oh, p = e / (pc.ow * pc.oh);
    if (pc.op == MAX) {
      int arg = window_argmax(p, oy, ox);
      y[e] = arg >= 0 ? a[arg] : uintBitsToFloat(NEG_INF_BITS);
      return;
    }
    int y0 = int(oy) * pc.sy - pc.py, x0 = int(ox) * pc.sx - pc.px;
    float s = 0.0;
    for (int i = max(y0, 0); i < min(y0 + int(pc.kh), int(pc.h)); ++i)
      for (int j = max(x0, 0); j < min(x0 + int(pc.kw), int(pc.w)); ++j) s += a[(int(p) * int(pc.h) + i) * int(pc.w) + j];
    y[e] = s / float(pc.kh * pc.kw);
    return;
  }
  // Gradients: e is an input element. Window oy covers rows [oy sy - py, oy sy - py + kh).
  int ix = int(e % pc.w), iy = int((e / pc.w) % pc.h);
  uint p = e / (pc.w * pc.h);
  int ylo = iy + pc.py - int(pc.kh) + 1, xlo = ix + pc.px - int(pc.kw) + 1;
  int oy0 = ylo <= 0 ? 0 : (ylo + pc.sy - 1) / pc.sy, oy1 = min((iy + pc.py) / pc.sy, int(pc.oh) - 1);
  int ox0 = xlo <= 0 ? 0 : (xlo + pc.sx - 1) / pc.sx, ox1 = min((ix + pc.px) / pc.sx, int(pc.ow) - 1);
  float s = 0.0;
  for (int oy = oy0; oy <= oy1; ++oy) {
    for (int ox = ox0; ox <= ox1; ++ox) {
      uint o = (p * pc.oh + uint(oy)) * pc.ow + uint(ox);
      if (pc.op == AVG_BACKWARD) s += a[o] / float(pc.kh * pc.kw);
      else if (window_argmax(p, uint(oy), uint(ox)) == int(e)) s += b[o];
    }
  }
  y[e] = s;
}
