#include "allocation_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<size_t> largest{0};
}

namespace meganeura::io::testing {
void reset_largest_allocation() {
  largest = 0;
}
size_t largest_allocation() {
  return largest;
}
}  // namespace meganeura::io::testing

// The array and nothrow forms call these by default, so replacing them sees everything
// the reader allocates without an explicit alignment.
void* operator new(std::size_t n) {
  size_t seen = largest.load(std::memory_order_relaxed);
  while (n > seen && !largest.compare_exchange_weak(seen, n)) {
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
