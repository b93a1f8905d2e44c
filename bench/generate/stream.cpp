// A STREAM-like copy: the bandwidth bound of decoding, which reads every weight once per token.
// `threads` threads each copy their share of two 256 MiB arrays (far above any cache); prints
// the median over repetitions of bytes moved (read + written) per second as JSON.
// Usage: bench_stream [threads] [repetitions]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  const int reps = argc > 2 ? std::max(3, std::atoi(argv[2])) : 15;
  const size_t n = size_t(64) << 20;  // floats per array: 256 MiB
  std::vector<float> a(n), b(n);
  auto parts = [&](auto&& body) {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { body(n * size_t(t) / size_t(threads), n * size_t(t + 1) / size_t(threads)); });
    for (auto& th : pool) th.join();
  };
  parts([&](size_t lo, size_t hi) {  // first touch by the thread that copies the range later
    std::fill(a.begin() + long(lo), a.begin() + long(hi), 1.0f);
    std::fill(b.begin() + long(lo), b.begin() + long(hi), 0.0f);
  });
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    parts([&](size_t lo, size_t hi) { std::memcpy(b.data() + lo, a.data() + lo, (hi - lo) * sizeof(float)); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(2.0 * double(n * sizeof(float)) / s);
  }
  std::sort(rates.begin(), rates.end());
  if (b[n / 2] != 1.0f) return 1;
  std::printf("{\"threads\": %d, \"repetitions\": %d, \"copy_bytes_per_second\": %.6g}\n", threads, reps,
              rates[rates.size() / 2]);
  return 0;
}
