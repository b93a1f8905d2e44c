// A small fork-join pool for the reference kernels. Workers block on a condition variable
// between loops instead of spinning, so they never compete with the BLAS library's own
// threads for the cores (OpenMP's spin-waiting made GEMM-heavy steps 7x slower on 2 cores).
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>

namespace meganeura::cpu {

// Calls body(begin, end) over [0, n) split into contiguous chunks, one per thread, when n is
// at least `min_parallel`; otherwise runs body(0, n) on the caller. Chunks are a fixed function
// of n and the thread count, so results are deterministic.
void parallel_for(int64_t n, int64_t min_parallel, const std::function<void(int64_t, int64_t)>& body);

void set_threads(int threads);  // 0: all cores
int thread_count();

// While alive, asynchronous signals (SIGINT, SIGTERM, SIGUSR1, ...) are blocked on the calling
// thread; a signal sent meanwhile stays pending, or goes to a thread that is not running a
// program, and is handled once the program has run. Synchronous fault signals stay unblocked.
// The pool's workers block the same set for good. A signal handled on a thread in the middle of
// a CPU program has been seen to corrupt the heap (docs/python.md, "Interrupts"): a process
// that handles signals (Python's Ctrl-C handler) must not have one land inside a step.
class SignalsDeferred {
 public:
  SignalsDeferred();
  ~SignalsDeferred();
  SignalsDeferred(const SignalsDeferred&) = delete;
  SignalsDeferred& operator=(const SignalsDeferred&) = delete;

 private:
  sigset_t old_;
};

}  // namespace meganeura::cpu
