// The reduction walk shared by the primitive reductions (sum, mean, max) and the fused
// reductions: the input is visited as runs of its last dimension, each run's values summed (or
// maximised) in double. Every output slot belongs to one part of the split and is accumulated
// in the same order whatever the thread count.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"

namespace meganeura::cpu {

// The sum (or maximum) of a contiguous run, in double: four interleaved partial sums, so the
// additions are not one dependent chain (a fixed order: the result does not depend on threads).
template <class T>
double run_total(const T* q, int64_t len, bool is_max) {
  double a[4];
  std::fill(a, a + 4, is_max ? -INFINITY : 0.0);
  int64_t j = 0;
  if (is_max) {
    for (; j + 4 <= len; j += 4) {
      for (int k = 0; k < 4; ++k) a[k] = std::max(a[k], double(q[j + k]));
    }
    for (; j < len; ++j) a[0] = std::max(a[0], double(q[j]));
    return std::max(std::max(a[0], a[1]), std::max(a[2], a[3]));
  }
  for (; j + 4 <= len; j += 4) {
    for (int k = 0; k < 4; ++k) a[k] += double(q[j + k]);
  }
  for (; j < len; ++j) a[0] += double(q[j]);
  return (a[0] + a[1]) + (a[2] + a[3]);
}

// acc[j] (+)= q[j] for a run of kept positions.
template <class T>
void accumulate_run(double* __restrict acc, const T* __restrict q, int64_t len, bool is_max) {
  if (is_max) {
    for (int64_t j = 0; j < len; ++j) acc[j] = std::max(acc[j], double(q[j]));
  } else {
    for (int64_t j = 0; j < len; ++j) acc[j] += double(q[j]);
  }
}

// A reduction's input shape without its dimensions of extent 1 and with neighbouring
// dimensions that are both reduced or both kept merged (row-major memory keeps them
// contiguous). Dropping the 1s matters: a trailing kept 1 (a sum over the last axis written as
// [outer, len, 1]) would otherwise make every run one element long.
struct ReduceShape {
  int64_t dims = 0;
  int64_t ext[push::kMaxRank] = {};
  bool red[push::kMaxRank] = {};
  // Bit d of `axes` set: dimension d of `extents` is reduced.
  ReduceShape(const int64_t* extents, int64_t rank, uint32_t axes) {
    for (int64_t i = 0; i < rank; ++i) {
      const bool r = axes >> i & 1;
      if (extents[i] == 1) continue;
      if (dims > 0 && red[dims - 1] == r) {
        ext[dims - 1] *= extents[i];
      } else {
        ext[dims] = extents[i];
        red[dims++] = r;
      }
    }
    if (dims == 0 && rank > 0) ext[dims++] = 1;  // one element: one kept run of length 1
  }
  // From a reduction's push block (schedule.h): the extents and axis mask of a reduction over
  // non-contiguous axes, else [outer, len, inner] with the middle reduced.
  explicit ReduceShape(const PushConstants& p) {
    const int64_t rank = p.get(push::kReduceRank);
    int64_t e[push::kMaxRank];
    if (rank > 0) {
      for (int64_t i = 0; i < rank; ++i) e[i] = p.get(push::kReduceExtents + size_t(i));
      *this = ReduceShape(e, rank, p.get(push::kReduceAxes));
    } else {
      e[0] = p.get(push::kReduceOuter), e[1] = p.get(push::kReduceLen), e[2] = p.get(push::kReduceInner);
      *this = ReduceShape(e, 3, 0b010);
    }
  }
  int64_t elements() const {
    int64_t n = 1;
    for (int64_t i = 0; i < dims; ++i) n *= ext[i];
    return n;
  }
};

// acc[o] (+)= the values reduced into output o, for acc prefilled (0, or -inf for a maximum).
// `make_part()` is called once per part of the split, on the thread that runs it; the object
// it returns gives the input's values: part.values(offset, want, &got) returns a pointer to
// `got` (1 to `want`) consecutive values from row-major position `offset`. The input is walked
// one run of the last merged dimension at a time, offsets advanced by an odometer; the largest
// kept dimension is split over the pool.
template <class T, class MakePart>
void reduce_runs(const ReduceShape& s, bool is_max, double* acc, MakePart&& make_part) {
  const int64_t dims = s.dims, last = dims - 1;
  if (dims == 0) return;
  int64_t istride[push::kMaxRank] = {}, ostride[push::kMaxRank] = {}, n = 1, o_n = 1, split = -1;
  for (int64_t i = dims; i-- > 0;) {
    istride[i] = n;
    n *= s.ext[i];
    if (!s.red[i]) {
      ostride[i] = o_n;
      o_n *= s.ext[i];
      if (split < 0 || s.ext[i] >= s.ext[split]) split = i;
    }
  }
  if (n == 0) return;
  const int64_t parts = split < 0 ? 1 : s.ext[split];
  parallel_for(parts, n > kParallelMin ? 1 : INT64_MAX, [&](int64_t p0, int64_t p1) {
    auto part = make_part();
    int64_t ext[push::kMaxRank], idx[push::kMaxRank] = {};
    std::copy(s.ext, s.ext + dims, ext);
    int64_t in = 0, o = 0;
    if (split >= 0) {
      ext[split] = p1 - p0;
      in = p0 * istride[split];
      o = p0 * ostride[split];
    }
    int64_t runs = 1;
    for (int64_t k = 0; k < last; ++k) runs *= ext[k];
    const int64_t run = ext[last];  // this part's share when the split dimension is the last
    for (int64_t r = 0; r < runs; ++r) {
      for (int64_t c = 0; c < run;) {
        int64_t got = 0;
        const T* q = part.values(in + c, run - c, &got);
        if (s.red[last]) {
          const double t = run_total<T>(q, got, is_max), a = acc[o];
          acc[o] = is_max ? std::max(a, t) : a + t;
        } else {
          accumulate_run(acc + o + c, q, got, is_max);
        }
        c += got;
      }
      for (int64_t k = last - 1; k >= 0; --k) {  // next run: advance the odometer
        in += istride[k];
        o += ostride[k];
        if (++idx[k] < ext[k]) break;
        in -= istride[k] * ext[k];
        o -= ostride[k] * ext[k];
        idx[k] = 0;
      }
    }
  });
}

}  // namespace meganeura::cpu
