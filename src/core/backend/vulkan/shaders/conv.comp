#version 450
// Direct 2-D convolution and its two gradients, one invocation per output element (grouped,
// strided, padded, dilated). The input gradient inverts the index map instead of scattering,
// so no atomics are needed and the result is deterministic.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer A { float a[]; };  // forward: x; input grad: dy; weight grad: x
layout(std430, binding = 1) readonly buffer B { float b[]; };  // forward: w; input grad: w;  weight grad: dy
layout(std430, binding = 2) writeonly buffer Y { float y[]; };

const uint FORWARD = 0, BACKWARD_INPUT = 1, BACKWARD_WEIGHT = 2;

layout(push_constant) uniform P {
  uint total, op, n, c, h, w, o, kh, kw, oh, ow, groups;
  int sy, sx, py, px, dy_, dx_;
} pc;

void main() {
  uint e = flat_index();
  if (e >= pc.total) return;
  const uint cg = pc.c / pc.groups, og = pc.o / pc.groups;
  float s = 0.0;
  if (pc.op == FORWARD) {
    uint ox = e % pc.ow, oy = (e / pc.ow) % pc.oh, oc = (e / (pc.ow * pc.oh)) % pc.o, nn = e / (pc.ow * pc.oh * pc.o);
    uint g = oc / og;
    for (uint ci = 0; ci < cg; ++ci)
      for (uint i = 0; i < pc.kh; ++i) {
        int iy = int(oy) * pc.sy - pc.py + int(i) * pc.dy_;
        if (iy < 0 || iy >= int(pc.h)) continue;
        for (uint j = 0; j < pc.kw; ++j) {
          int ix = int(ox) * pc.sx - pc.px + int(j) * pc.dx_;
          if (ix < 0 || ix >= int(pc.w)) continue;
          s += a[((nn * pc.c + g * cg + ci) * pc.h + uint(iy)) * pc.w + uint(ix)] * b[((oc * cg + ci) * pc.kh + i) * pc.kw + j];
        }
      }
  } else if (pc.op == BACKWARD_INPUT) {
    uint ix = e % pc.w, iy = (e / pc.w) % pc.h, ch = (e / (pc.w * pc.h)) % pc.c, nn = e / (pc.w * pc.h * pc.c);
    uint g = ch / cg, ci = ch % cg;
    for (uint oc = g * og; oc < (g + 1) * og; ++oc)
      for (uint i = 0; i < pc.kh; ++i) {
        int ty = int(iy) + pc.py - int(i) * pc.dy_;
        if (ty < 0 || ty % pc.sy != 0 || ty / pc.sy >= int(pc.oh)) continue;
        for (uint j = 0; j < pc.kw; ++j) {
          int tx = int(ix) + pc.px - int(j) * pc.dx_;
          if (tx < 0 || tx % pc.sx != 0 || tx / pc.sx >= int(pc.ow)) continue;
          s += a[((nn * pc.o + oc) * pc.oh + uint(ty / pc.sy)) * pc.ow + uint(tx / pc.sx)] * b[((oc * cg + ci) * pc.kh + i) * pc.kw + j];
        }
      }
  } else {
    uint j = e % pc.kw, i = (e / pc.kw) % pc.kh, ci = (e / (pc.kw * pc.kh)) % cg, oc = e / (pc.kw * pc.kh * cg);
    uint g = oc / og;
    for (uint nn = 0; nn < pc.n; ++nn)
      for (uint oy = 0; oy < pc.oh; ++oy) {
        int iy = int(oy) * pc.sy - pc.py + int(i) * pc.dy_;
        if (iy < 0 || iy >= int(pc.h)) continue;
        for (uint ox = 0; ox < pc.ow; ++ox) {
          int ix = int(ox) * pc.sx - pc.px + int(j) * pc.dx_;
          if (ix < 0 || ix >= int(pc.w)) continue;
          s += b[((nn * pc.o + oc) * pc.oh + oy) * pc.ow + ox] * a[((nn * pc.c + g * cg + ci) * pc.h + uint(iy)) * pc.w + uint(ix)];
        }
      }
  }
  y[e] = s;
}
