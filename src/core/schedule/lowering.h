// Helpers shared by the lowering of the fused ops (schedule.cpp) and of the primitive ops
// (primitives.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "schedule/schedule.h"

namespace meganeura::lowering {

constexpr uint32_t kGroup = 256;  // workgroup size of the one-dimensional kernels

// `v` as a push word; throws "[schedule] <what> ... does not fit 32 bits" otherwise.
uint32_t u32(int64_t v, const char* what);
// Linear launch over n items: x up to 65535 groups, the rest in y.
void linear(KernelLaunch& l, int64_t n);
// Collapses `out` and the broadcast inputs (right-aligned) into an ElementwiseLayout; returns
// false (or throws, when `required`) if they do not fit.
bool elementwise_layout(PushConstants& p, const Shape& out, const std::vector<const Shape*>& ins, bool required = true);
// The launch of a primitive (unfused) op: kernel name, push words, groups.
void lower_primitive(const Program& p, const Dispatch& d, KernelLaunch& l);

}  // namespace meganeura::lowering
