// The leaves: inputs, parameters, states and constants (built by Graph's own methods).
#include "ops/op_def.h"

namespace meganeura::ops {
namespace {
constexpr OpSpec leaf() {
  return OpSpec{.family = OpFamily::leaf,
                .arity = 0,
                .grad = GradKind::leaf,
                .cost = cost::none(),
                .cpu = CpuKernel::none,
                .vulkan = VkKernel::none};
}
}  // namespace
}  // namespace meganeura::ops

MEGANEURA_DEFINE_OP_(input, leaf())
MEGANEURA_DEFINE_OP_(parameter, leaf())
MEGANEURA_DEFINE_OP_(state, leaf())
MEGANEURA_DEFINE_OP_(constant, leaf())
