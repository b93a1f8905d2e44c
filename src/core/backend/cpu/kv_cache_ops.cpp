// The key/value cache ops (ops/kv_cache.cpp): the cache write, attention over the cache prefix
// and rope at an offset. The position is read from its i32 tensor here, at run time, and
// checked before anything is written.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"

namespace meganeura::cpu {
namespace {

// The position of the first of `rows` new rows, checked against a cache of `capacity`.
int64_t checked_position(Op op, const Arg& pos, int64_t rows, int64_t capacity) {
  const int64_t p = pos.as<int32_t>()[0];
  if (p < 0 || p + rows > capacity) {
    kernel_error(op, "position " + std::to_string(p) + " with " + std::to_string(rows) +
                         " new rows is outside the cache of " + std::to_string(capacity) + " positions");
  }
  return p;
}

// out = cache with rows [outer, s, d] written at positions p..p+s-1 of [outer, tmax, d]. When
// the output is the cache's own memory (the planned case), only the new rows are written.
template <class T>
void cache_write(const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  const int64_t outer = l.push.get(push::kCacheOuter), s = l.push.get(push::kCacheRows),
                tmax = l.push.get(push::kCacheLen), d = l.push.get(push::kCacheDim);
  const int64_t p = checked_position(Op::kv_cache_write, in[2], s, tmax);
  const T* cache = in[0].as<T>();
  const T* rows = in[1].as<T>();
  T* y = out.as<T>();
  if (y != cache) std::memcpy(y, cache, size_t(outer * tmax * d) * sizeof(T));
  for (int64_t o = 0; o < outer; ++o) std::memcpy(y + (o * tmax + p) * d, rows + o * s * d, size_t(s * d) * sizeof(T));
}

// One query row over keys [lo, hi] of its kv head: softmax(q k^T * scale) v, in double.
template <class T>
void attend_row(const T* q, const T* k, const T* v, int64_t lo, int64_t hi, int64_t d, int64_t dv, double scale,
                std::vector<double>& s, std::vector<double>& acc, T* y) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = lo; j <= hi; ++j) {
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += double(q[c]) * double(k[j * d + c]);
    s[size_t(j - lo)] = dot * scale;
    mx = std::max(mx, s[size_t(j - lo)]);
  }
  std::fill(acc.begin(), acc.end(), 0.0);
  double sum = 0;
  for (int64_t j = lo; j <= hi; ++j) {
    const double e = std::exp(s[size_t(j - lo)] - mx);
    sum += e;
    for (int64_t c = 0; c < dv; ++c) acc[size_t(c)] += e * double(v[j * dv + c]);
  }
  for (int64_t c = 0; c < dv; ++c) y[c] = T(acc[size_t(c)] / sum);
}

template <class T>
void cached_attention(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  auto w = [&](size_t i) { return int64_t(l.push.get(push::kAttention + i)); };
  const int64_t b = w(0), hq = w(1), hkv = w(2), sq = w(3), tmax = w(4), dim = w(5), dv = w(6);
  const auto& a = std::get<CachedAttentionAttrs>(d.attrs);
  const int64_t p = checked_position(d.op, in[3], sq, tmax);
  const T *q = in[0].as<T>(), *k = in[1].as<T>(), *v = in[2].as<T>();
  T* y = out.as<T>();
  const int64_t rows = b * hq * sq, group = hq / hkv;
  parallel_for(rows, rows * (p + sq) * (dim + dv) > kParallelMin ? 1 : INT64_MAX, [&](int64_t r0, int64_t r1) {
    std::vector<double> s(static_cast<size_t>(p + sq)), acc(static_cast<size_t>(dv));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = r % sq, h = (r / sq) % hq, bi = r / (sq * hq);
      const int64_t kvh = bi * hkv + h / group;  // the kv head this query head reads
      const int64_t hi = p + i, lo = a.window > 0 ? std::max<int64_t>(0, hi - a.window + 1) : 0;
      attend_row(q + r * dim, k + kvh * tmax * dim, v + kvh * tmax * dv, lo, hi, dim, dv, a.scale, s, acc, y + r * dv);
    }
  });
}

template <class T>
void rope_at(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  const auto& a = std::get<RopeAttrs>(d.attrs);
  const int64_t rows = l.push.get(push::kSeqRows), dim = l.push.get(push::kSeqLen),
                seq = l.push.get(push::kSeqPositions), half = dim / 2;
  const int64_t offset = in[1].as<int32_t>()[0];
  const double sign = a.inverse ? -1.0 : 1.0;
  std::vector<double> cs(size_t(seq * half)), sn(size_t(seq * half));  // per (position, pair)
  for (int64_t i = 0; i < seq; ++i) {
    for (int64_t j = 0; j < half; ++j) {
      const double angle = sign * double(offset + i) * rope_frequency(a, j, dim);
      cs[size_t(i * half + j)] = std::cos(angle);
      sn[size_t(i * half + j)] = std::sin(angle);
    }
  }
  const T* x = in[0].as<T>();
  T* y = out.as<T>();
  parallel_for(rows, (rows * dim > kParallelMin) ? 1 : INT64_MAX, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const double* c = cs.data() + (r % seq) * half;
      const double* sv = sn.data() + (r % seq) * half;
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
