// The CPU backend's fork-join pool: a throwing chunk is reported only after every other chunk
// has finished, and the pool stays usable.
#include "backend/cpu/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace meganeura::cpu {
namespace {

TEST(Parallel, ThrowingChunkWaitsForTheOthers) {
  set_threads(4);
  std::atomic<bool> released{false};
  std::atomic<int> finished{0};
  auto body = [&](int64_t begin, int64_t) {
    if (begin == 0) throw std::runtime_error("chunk 0 failed");
    // The other chunks wait for a release that only comes after parallel_for has returned,
    // bounded so that a correct pool (which waits for them) still finishes.
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    while (!released && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    ++finished;
  };
  EXPECT_THROW(parallel_for(4, 1, body), std::runtime_error);
  const int after_return = finished.load();
  released = true;
  EXPECT_EQ(after_return, 3) << "parallel_for returned while chunks were still running";
  // Still usable: every index visited once.
  std::atomic<int64_t> total{0};
  parallel_for(1000, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) total += i;
  });
  EXPECT_EQ(total.load(), 999 * 1000 / 2);
  set_threads(0);
}

}  // namespace
}  // namespace meganeura::cpu
