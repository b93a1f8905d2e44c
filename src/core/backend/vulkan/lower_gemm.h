// The contractions' lowering: matmul, matmul_epilogue (its program fused into the GEMM) and
// the convolution passes (implicit GEMMs) onto the GEMM kernels (shaders/gemm.glsl), with
// tiles from the device class, K split across workgroups when the tiles alone would leave the
// device idle or an invocation's loop would run past the device's loop budget, and the planned
// loop iterations of every launch.
#pragma once

#include <vector>

#include "backend/vulkan/lowering.h"

namespace meganeura::vk {

// `base` carries the dispatch's bookkeeping (kernel, dispatch index, reads, write).
void lower_matmul(const Program& p, const Dispatch& d, const DeviceClass& dc, Launch base, std::vector<Launch>& out);
// `base` also carries the encoded program (`code`) and, in push words
// 0-10, the schedule's elementwise layout of the output (ElementwiseLayout).
void lower_matmul_epilogue(const Program& p, const Dispatch& d, const DeviceClass& dc, Launch base,
                           std::vector<Launch>& out);
void lower_conv(const Program& p, const Dispatch& d, const DeviceClass& dc, Launch base, std::vector<Launch>& out);

// The GEMM family, its tiles and the workgroups that fill the device, for `info` (the
// workgroup, shared-memory and binding limits already in `dc`); `kernels` forces a family.
void gemm_device_class(DeviceClass& dc, const VulkanDeviceInfo& info, VulkanOptions::Kernels kernels);

// floor(x / d) = mulhi(x, multiplier) >> (shift - 1) for x < 2^31 (multiplier 0: d is 1), the
// form the convolution kernels divide by their sizes in.
struct FastDivisor {
  uint32_t multiplier = 0, shift = 0;
};
FastDivisor fast_divisor(uint32_t d);

}  // namespace meganeura::vk
