// The machine's two limits that generation is measured against, with `threads` threads:
// - a STREAM-like copy, the bandwidth bound of decoding (which reads every weight once per
//   token): each thread copies its share of two 256 MiB arrays (far above any cache);
// - the f32 multiply-add peak, the bound of prefill (matrix products): each thread runs
//   independent chains of fused multiply-adds on the widest vectors the CPU has (AVX-512 or
//   AVX2, chosen at run time), enough chains to hide the instruction's latency.
// Prints the medians over repetitions as JSON: bytes moved (read + written) per second, and
// floating-point operations (a multiply-add counts two) per second.
// Usage: bench_stream [threads] [repetitions]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kChains = 12;               // independent accumulators: latency 4 x 2 ports + slack
constexpr long kIterations = 20'000'000;  // per thread and repetition

// kChains independent accumulators updated in turn: acc = acc * a + b. The same code per
// vector width, each compiled for its instruction set.
#define MEGANEURA_FMA_CHAINS(V, SET, FMA, STORE, LANES)                                    \
  V acc[kChains];                                                                          \
  for (int c = 0; c < kChains; ++c) acc[c] = SET(float(c) * 1e-3f);                        \
  const V a = SET(0.999999f), b = SET(1e-7f);                                              \
  for (long i = 0; i < iterations; ++i) {                                                  \
    _Pragma("GCC unroll 16") for (int c = 0; c < kChains; ++c) acc[c] = FMA(acc[c], a, b); \
  }                                                                                        \
  alignas(64) float f[LANES];                                                              \
  float s = 0;                                                                             \
  for (int c = 0; c < kChains; ++c) {                                                      \
    STORE(f, acc[c]);                                                                      \
    for (float x : f) s += x;                                                              \
  }                                                                                        \
  return s;

__attribute__((target("avx512f"))) float chains512(long iterations) {
  MEGANEURA_FMA_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_store_ps, 16)
}
__attribute__((target("avx2,fma"))) float chains256(long iterations) {
  MEGANEURA_FMA_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_store_ps, 8)
}

template <class Body>
void on_threads(int threads, Body body) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { body(t); });
  for (auto& th : pool) th.join();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  const int reps = argc > 2 ? std::max(3, std::atoi(argv[2])) : 15;
  const size_t n = size_t(64) << 20;  // floats per array: 256 MiB
  std::vector<float> a(n), b(n);
  auto share = [&](int t, size_t& lo, size_t& hi) {
    lo = n * size_t(t) / size_t(threads);
    hi = n * size_t(t + 1) / size_t(threads);
  };
  on_threads(threads, [&](int t) {  // first touch by the thread that copies the range later
    size_t lo, hi;
    share(t, lo, hi);
    std::fill(a.begin() + long(lo), a.begin() + long(hi), 1.0f);
    std::fill(b.begin() + long(lo), b.begin() + long(hi), 0.0f);
  });
  std::vector<double> copy, flops;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    on_threads(threads, [&](int t) {
      size_t lo, hi;
      share(t, lo, hi);
      std::memcpy(b.data() + lo, a.data() + lo, (hi - lo) * sizeof(float));
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    copy.push_back(2.0 * double(n * sizeof(float)) / s);
  }
  if (b[n / 2] != 1.0f) return 1;
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    std::fprintf(stderr, "bench_stream: the multiply-add peak needs AVX2 with FMA or AVX-512\n");
    return 2;
  }
  const int lanes = avx512 ? 16 : 8;
  std::vector<float> sink(size_t(threads), 0.0f);
  for (int r = 0; r < std::max(3, reps / 3); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    on_threads(threads, [&](int t) { sink[size_t(t)] += avx512 ? chains512(kIterations) : chains256(kIterations); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    flops.push_back(2.0 * double(threads) * double(kIterations) * kChains * lanes / s);
  }
  std::printf(
      "{\"threads\": %d, \"repetitions\": %d, \"copy_bytes_per_second\": %.6g, \"fma_flops_per_second\": %.6g, "
      "\"fma_vector\": \"%s\", \"checksum\": %.3g}\n",
      threads, reps, median(copy), median(flops), avx512 ? "avx512" : "avx2", double(sink[0]));
  return 0;
}
