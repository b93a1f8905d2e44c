// GLSL compute shaders compiled to SPIR-V at run time (glslang), for the kernels the backend
// writes itself (program_kernel.h). A shared library of its own: the compiler is large.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meganeura::vk {

// SPIR-V for Vulkan 1.1 of `source`, a complete compute shader (no #include). Thread-safe.
// Throws std::runtime_error with the compiler's log on failure.
__attribute__((visibility("default"))) std::vector<uint32_t> compile_glsl_compute(const std::string& source);

}  // namespace meganeura::vk
