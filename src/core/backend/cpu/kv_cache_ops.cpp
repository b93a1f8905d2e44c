// The key/value cache ops (ops/kv_cache.cpp): the cache write, attention over the cache prefix
// and rope at an offset. The position is read from its i32 tensor here, at run time, and
// checked before anything is written.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"

namespace meganeura::cpu {
namespace {

// The positions of the sequences (one for all, or one each: push::kCachePositions), read at
// run time; sequence b's is at(b). -1 marks an idle sequence; any other position must leave room
// for `rows` new rows in a cache of `capacity`.
class Positions {
 public:
  static constexpr int64_t kIdle = -1;
  Positions(Op op, const KernelLaunch& l, const Arg& pos, int64_t rows, int64_t capacity)
      : p_(pos.as<int32_t>()), n_(l.push.get(push::kCachePositions)) {
    for (int64_t b = 0; b < n_; ++b) {
      const int64_t p = p_[b];
      if (p != kIdle && (p < 0 || p + rows > capacity)) {
        kernel_error(op, (n_ > 1 ? "sequence " + std::to_string(b) + ": " : std::string()) + "position " +
                             std::to_string(p) + " with " + std::to_string(rows) +
                             " new rows is outside the cache of " + std::to_string(capacity) + " positions");
      }
    }
  }
  int64_t at(int64_t b) const { return p_[n_ > 1 ? b : 0]; }
  // Sequence of leading-axis index `o` when `outer` such indices split evenly among the sequences.
  int64_t of(int64_t o, int64_t outer) const { return at(n_ > 1 ? o / (outer / n_) : 0); }

 private:
  const int32_t* p_;
  int64_t n_;
};

// out = cache with rows [outer, s, d] written at positions p..p+s-1 of [outer, tmax, d]. When
// the output is the cache's own memory (the planned case), only the new rows are written.
template <class T>
void cache_write(const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  const int64_t outer = l.push.get(push::kCacheOuter), s = l.push.get(push::kCacheRows),
                tmax = l.push.get(push::kCacheLen), d = l.push.get(push::kCacheDim);
  const Positions pos(Op::kv_cache_write, l, in[2], s, tmax);
  const T* cache = in[0].as<T>();
  const T* rows = in[1].as<T>();
  T* y = out.as<T>();
  if (y != cache) std::memcpy(y, cache, size_t(outer * tmax * d) * sizeof(T));
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t p = pos.of(o, outer);
    if (p != Positions::kIdle) std::memcpy(y + (o * tmax + p) * d, rows + o * s * d, size_t(s * d) * sizeof(T));
  }
}

// Attention of query rows at positions p..p+sq-1 over the cache prefix, in tiles of query rows
// of one head: scores by GEMM over the keys up to the tile's last position, the future (and
// what lies outside the window) masked, softmax with the sum in double, then P V by GEMM (as
// the attention kernel's forward).
constexpr int64_t kRowTile = 64;

template <class T>
void cached_attention(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  auto w = [&](size_t i) { return int64_t(l.push.get(push::kAttention + i)); };
  const int64_t b = w(0), hq = w(1), hkv = w(2), sq = w(3), tmax = w(4), dim = w(5), dv = w(6);
  const auto& a = std::get<CachedAttentionAttrs>(d.attrs);
  const Positions pos(d.op, l, in[3], sq, tmax);
  int64_t longest = 0;  // the furthest position any sequence reaches
  for (int64_t i = 0; i < b; ++i) longest = std::max(longest, pos.at(i) + sq);
  const T *q = in[0].as<T>(), *k = in[1].as<T>(), *v = in[2].as<T>();
  T* y = out.as<T>();
  const int64_t group = hq / hkv, tiles = (sq + kRowTile - 1) / kRowTile, tasks = b * hq * tiles;
  const T ninf = -std::numeric_limits<T>::infinity();
  parallel_for(tasks, tasks * longest * (dim + dv) > kParallelMin ? 1 : INT64_MAX, [&](int64_t t0, int64_t t1) {
    std::vector<T> s(size_t(std::min(kRowTile, sq) * longest));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = t / tiles, r0 = (t % tiles) * kRowTile, rows = std::min(kRowTile, sq - r0);
      const int64_t p = pos.at(bh / hq);
      if (p == Positions::kIdle) {
        std::fill_n(y + (bh * sq + r0) * dv, rows * dv, T(0));
        continue;
      }
      const int64_t kvh = (bh / hq) * hkv + (bh % hq) / group;  // the kv head this query head reads
      const int64_t keys = p + r0 + rows;                       // positions 0 .. the tile's last
      const T* qt = q + (bh * sq + r0) * dim;
      gemm_serial(false, true, rows, keys, dim, T(a.scale), qt, dim, k + kvh * tmax * dim, dim, T(0), s.data(), keys);
      for (int64_t i = 0; i < rows; ++i) {
        T* row = s.data() + i * keys;
        const int64_t hi = p + r0 + i, lo = a.window > 0 ? std::max<int64_t>(0, hi - a.window + 1) : 0;
        std::fill(row, row + lo, ninf);
        std::fill(row + hi + 1, row + keys, ninf);
        const T mx = *std::max_element(row + lo, row + hi + 1);
        double sum = 0;
        for (int64_t j = 0; j < keys; ++j) sum += double(row[j] = row[j] == ninf ? T(0) : std::exp(row[j] - mx));
        const T inv = T(1 / sum);
        for (int64_t j = lo; j <= hi; ++j) row[j] *= inv;
      }
      gemm_serial(false, false, rows, dv, keys, T(1), s.data(), keys, v + kvh * tmax * dv, dv, T(0),
                  y + (bh * sq + r0) * dv, dv);
    }
  });
}

template <class T>
void rope_at(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  const auto& a = std::get<RopeAttrs>(d.attrs);
  const int64_t rows = l.push.get(push::kSeqRows), dim = l.push.get(push::kSeqLen),
                seq = l.push.get(push::kSeqPositions), half = dim / 2;
  // Rotation by sequence and position; an idle sequence (-1) rotates as position 0.
  const int64_t n = l.push.get(push::kCachePositions), per = rows / n;
  const int32_t* offset = in[1].as<int32_t>();
  const double sign = a.inverse ? -1.0 : 1.0;
  std::vector<double> cs(size_t(n * seq * half)), sn(size_t(n * seq * half));  // per (sequence, position, pair)
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t i = 0; i < seq; ++i) {
      for (int64_t j = 0; j < half; ++j) {
        const double angle = sign * double(std::max(offset[b], 0) + i) * rope_frequency(a, j, dim);
        cs[size_t((b * seq + i) * half + j)] = std::cos(angle);
        sn[size_t((b * seq + i) * half + j)] = std::sin(angle);
      }
    }
  }
  const T* x = in[0].as<T>();
  T* y = out.as<T>();
  parallel_for(rows, (rows * dim > kParallelMin) ? 1 : INT64_MAX, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t at = (r / per) * seq + r % seq;
      const double* c = cs.data() + at * half;
      const double* sv = sn.data() + at * half;
      for (int64_t j = 0; j < half; ++j) {
        const double x1 = double(x[r * dim + j]), x2 = double(x[r * dim + j + half]);
        y[r * dim + j] = T(x1 * c[j] - x2 * sv[j]);
        y[r * dim + j + half] = T(x2 * c[j] + x1 * sv[j]);
      }
    }
  });
}

}  // namespace

template <class T>
void kv_cache(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  if (d.op == Op::kv_cache_write) return cache_write<T>(l, in, out);
  if (d.op == Op::cached_attention) return cached_attention<T>(d, l, in, out);
  if (d.op == Op::rope_at) return rope_at<T>(d, l, in, out);
  kernel_error(d.op, "not a key/value cache op");
}

template void kv_cache<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void kv_cache<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);

}  // namespace meganeura::cpu
