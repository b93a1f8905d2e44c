// The CPU reductions' shared walk (reduce_runs): sums over any axes against a direct f64 sum,
// and the walk reads whole runs of the reduced axis, not one element at a time, whatever
// dimensions of extent 1 the shape carries.
#include "backend/cpu/reduce_runs.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/parallel.h"

namespace meganeura::cpu {
namespace {

struct Case {
  std::vector<int64_t> ext;
  uint32_t axes;
};

// Direct oracle: out[o] = sum of x over the reduced axes, o indexing the kept ones row-major.
std::vector<double> oracle(const Case& c, const std::vector<float>& x) {
  const int64_t rank = int64_t(c.ext.size());
  int64_t outs = 1;
  for (int64_t d = 0; d < rank; ++d) outs *= (c.axes >> d & 1) ? 1 : c.ext[size_t(d)];
  std::vector<double> out(size_t(outs), 0.0);
  std::vector<int64_t> idx(size_t(rank), 0);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t o = 0;
    for (int64_t d = 0; d < rank; ++d) {
      if (!(c.axes >> d & 1)) o = o * c.ext[size_t(d)] + idx[size_t(d)];
    }
    out[size_t(o)] += double(x[i]);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < c.ext[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  return out;
}

TEST(ReduceRuns, SumsOverAnyAxesInWholeRuns) {
  set_threads(2);
  const std::vector<Case> cases = {
      {{16, 12288, 1}, 0b010},       // a last-axis sum written as [outer, len, inner = 1]
      {{1, 16, 4096}, 0b100},        // a leading 1
      {{4, 1, 64, 1, 50}, 0b10100},  // reduced 64 and 50 with a kept 1 between them
      {{8, 3, 1, 7}, 0b0101},        // channels kept, strided reduction
      {{1, 1, 1}, 0b010},            // one element
      {{5, 300}, 0b01},              // kept last axis: runs accumulated into several outputs
  };
  for (const Case& c : cases) {
    int64_t n = 1;
    for (int64_t e : c.ext) n *= e;
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(std::sin(0.37 * double(i)) + 0.01 * double(i % 7));
    const ReduceShape shape(c.ext.data(), int64_t(c.ext.size()), c.axes);
    const std::vector<double> want = oracle(c, x);
    std::vector<double> acc(want.size(), 0.0);
    std::atomic<int64_t> reads{0};
    struct Part {
      const float* x;
      std::atomic<int64_t>* reads;
      const float* values(int64_t offset, int64_t want, int64_t* got) {
        ++*reads;
        *got = want;
        return x + offset;
      }
    };
    reduce_runs<float>(shape, false, acc.data(), [&] { return Part{x.data(), &reads}; });
    std::string name;
    for (int64_t e : c.ext) name += std::to_string(e) + " ";
    ASSERT_EQ(acc.size(), want.size()) << name;
    for (size_t o = 0; o < want.size(); ++o) {
      // Both sides sum the same f32 values in f64, in different orders: agreement to 1e-12 of
      // the magnitude summed.
      EXPECT_NEAR(acc[o], want[o], 1e-12 * double(n)) << name << "output " << o;
    }
    // Runs of the innermost dimension that is not 1: a reduced one is read in one call per run.
    int64_t inner = 1;
    for (int64_t e : c.ext) inner = e != 1 ? e : inner;
    EXPECT_LE(reads.load(), std::max<int64_t>(n / inner, 1)) << name << "read in pieces shorter than a run";
  }
}

}  // namespace
}  // namespace meganeura::cpu
