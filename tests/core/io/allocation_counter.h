// Records the largest single heap allocation, through a replaced global operator new.
#pragma once

#include <cstddef>

namespace meganeura::io::testing {

void reset_largest_allocation();
size_t largest_allocation();

}  // namespace meganeura::io::testing
