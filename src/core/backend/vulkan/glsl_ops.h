// The GLSL text of the op codes and elementwise op functions, from the op declarations: built
// into ops_generated.glsl at build time for the kernels, and available at run time for the
// programs the backend writes itself.
#pragma once

#include <string>

#include "meganeura/graph.h"

namespace meganeura::vk {

// Codes beyond the ops for cast's conversions (cast between two float or two integer
// dtypes is OP_CAST, the identity on values).
constexpr uint32_t kGlslF32ToI32 = uint32_t(kOpCount), kGlslI32ToF32 = uint32_t(kOpCount) + 1;

std::string glsl_ops_source();
// The GLSL name of an op's function, op_<name>.
std::string glsl_op_function(Op op);

}  // namespace meganeura::vk
