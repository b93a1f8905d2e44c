#include "runtime/init.h"

#include <cmath>

#include "backend/cpu/parallel.h"
#include "graph/op_table.h"

namespace meganeura::runtime {
namespace {

constexpr uint64_t kIncrement = 0x9e3779b97f4a7c15ull;

// Draw k (1-based) of the splitmix64 stream that starts at `start`.
inline uint64_t draw(uint64_t start, uint64_t k) {
  uint64_t z = start + k * kIncrement;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline double uniform(uint64_t bits) { return double(bits >> 11) * 0x1.0p-53; }  // [0, 1)

// Below this many values one thread fills the buffer: waking the pool costs more.
constexpr int64_t kParallelMin = 1 << 15;
// Values converted to the stored type per step, from a small stack buffer of doubles.
constexpr int64_t kBlock = 512;

}  // namespace

bool has_initial_values(const ExternalBuffer& e) {
  return e.role == Role::constant || e.role == Role::parameter || e.role == Role::state;
}

void initial_values(const ExternalBuffer& e, uint64_t seed, std::byte* out) {
  const int64_t n = e.type.numel();
  if (e.role == Role::constant) {
    convert_values(DType::f64, e.const_data.data(), e.stored, out, n);
    return;
  }
  const uint64_t start = seed ^ fnv1a(e.name);
  const Init init = e.init;
  // Split in whole blocks of the stored type (one element for plain types; kBlock is a
  // multiple of every block, so each step converts whole blocks).
  const int64_t per = dtype_block(e.stored).elements;
  cpu::parallel_for(n / per, kParallelMin, [&](int64_t first, int64_t last) {
    double v[kBlock];
    const int64_t begin = first * per, end = last * per;
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t m = std::min(kBlock, end - b);
      for (int64_t j = 0; j < m; ++j) {
        const uint64_t i = uint64_t(b + j);
        double x = 0;
        switch (init.kind) {
          case Init::zeros: x = 0; break;
          case Init::ones: x = 1; break;
          case Init::constant: x = init.a; break;
          case Init::normal: {
            const double u1 = uniform(draw(start, 2 * i + 1)), u2 = uniform(draw(start, 2 * i + 2));
            x = init.a * (std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * M_PI * u2));
            break;
          }
          case Init::uniform: x = init.a * (2 * uniform(draw(start, i + 1)) - 1); break;
        }
        v[j] = x;
      }
      convert_values(DType::f64, v, e.stored, out + storage_bytes(e.stored, b), m);
    }
  });
}

}  // namespace meganeura::runtime
