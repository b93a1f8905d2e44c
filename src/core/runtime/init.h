// Initial values of a session's external buffers: parameters and states from their Init,
// constants from their data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "meganeura/program.h"

namespace meganeura::runtime {

// Whether `e` starts from values of its own (parameters, states, constants); inputs and
// outputs start as zeros.
bool has_initial_values(const ExternalBuffer& e);

// The initial values of `e` in its stored type, written to `out` (numel * dtype size bytes).
// Random draws come from a splitmix64 stream per buffer, seeded by seed ^ fnv1a(name): value i
// of a normal init takes draws 2i+1 and 2i+2 (Box-Muller, cosine branch), of a uniform init
// draw i+1. Splitmix64's state after k draws is start + k * increment, so every value is a
// function of its index alone and the values are filled in parallel: the result does not
// depend on the thread count.
void initial_values(const ExternalBuffer& e, uint64_t seed, std::byte* out);

}  // namespace meganeura::runtime
