// f32 convolutions on oneDNN's convolution primitives, for the cases where they beat im2col +
// GEMM (README's benchmark: 3x3 and 7x7 kernels, 1.4-2.7x single-threaded); everything else
// (1x1 kernels, groups, dilation) stays on im2col + GEMM.
#pragma once

#include "backend/cpu/kernels.h"

namespace meganeura::cpu {

// Turns the primitives off (process-wide; on unless changed), for benchmarks against im2col.
void set_onednn_conv(bool on);

// Whether onednn_conv handles this convolution op (x: the input's shape, w: the weight's).
bool onednn_conv_applies(Op op, const Shape& x, const Shape& w, const ConvAttrs& a);

// Runs conv2d (x, w -> y), conv2d_backward_input (dy, w -> dx) or conv2d_backward_weight
// (x, dy -> dw) for shapes x, w, y. The batch is split over the backend's pool, one primitive
// call per part; primitives are created once per shape and thread, then reused.
void onednn_conv(Op op, const Shape& x, const Shape& w, const Shape& y, const ConvAttrs& a, const float* in0,
                 const float* in1, float* out);

}  // namespace meganeura::cpu
