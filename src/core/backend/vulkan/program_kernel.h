// The kernels of fused programs: fused.comp (fused_elementwise, fused_reduce) and the GEMM with
// its epilogue (matmul_epilogue) compiled at run time, once per program, with the program as
// straight-line GLSL in place of the build's stand-in (shaders/fused_program.glsl). No kernel
// interprets a program: each runs its own code, which the driver optimises as a whole.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/vulkan/pipelines.h"

namespace meganeura::vk {

// The GLSL of `program` (3 words per instruction, as specialise_program lays them out after
// kProgramSpecBase: kind | op << 8 | index << 16, the f32 bits of a, of b): a function
// `float program(uint i, float product)` computing the program for element i. Input 0 is
// `product` where product_input (an epilogue), every other input program_input(k, i); a
// multi-output program writes outv[k] and returns outv[0]. Throws std::invalid_argument
// naming the instruction for a malformed program.
std::string program_glsl(std::span<const uint32_t> program, bool product_input);

// SPIR-V (storage buffers Aliased) of kernel k (Kernel::fused or Kernel::matmul_fused)
// compiled with `program`. Throws std::runtime_error with the compiler's message on failure.
std::vector<uint32_t> program_kernel_spirv(Kernel k, std::span<const uint32_t> program);

}  // namespace meganeura::vk
