// The GEMM kernels' operand buffers: A at binding 0, B at binding 1, as f32 (scalars and vec4s)
// or in 16 bits (half.glsl) in the formats A_FORMAT and B_FORMAT (gemm_params.glsl). The loads
// take element (or quad) indices either way.
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(std430, binding = 0) readonly buffer AH { uint ah[]; };
layout(std430, binding = 0) readonly buffer AH2 { uvec2 ah2[]; };
layout(std430, binding = 1) readonly buffer BH { uint bh[]; };
layout(std430, binding = 1) readonly buffer BH2 { uvec2 bh2[]; };
float a_load(uint i) { return A_FORMAT != HALF_F32 ? half_value(ah[i >> 1], i, A_FORMAT) : a[i]; }
vec4 a_load4(uint q) { return A_FORMAT != HALF_F32 ? half_quad(ah2[q], A_FORMAT) : a4[q]; }
float b_load(uint i) { return B_FORMAT != HALF_F32 ? half_value(bh[i >> 1], i, B_FORMAT) : b[i]; }
vec4 b_load4(uint q) { return B_FORMAT != HALF_F32 ? half_quad(bh2[q], B_FORMAT) : b4[q]; }
