// CPU kernels for where, gather along an axis (and its scatter-add) and the fused token
// cross-entropy with its backward.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"

namespace meganeura::cpu {
namespace {

void check_index(Op op, int32_t id, int64_t pos, int64_t size) {
  if (id < 0 || id >= size) {
    kernel_error(op, "index " + std::to_string(id) + " at position " + std::to_string(pos) + " out of range [0, " +
                         std::to_string(size) + ")");
  }
}

template <class T>
void where_kernel(const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  const Broadcast bc(l.push);
  const int64_t* os = bc.ext;
  const int64_t* sc = bc.stride[0];
  const int64_t* sa = bc.stride[1];
  const int64_t* sb = bc.stride[2];
  const T* c = in[0].as<T>();
  const T* a = in[1].as<T>();
  const T* b = in[2].as<T>();
  T* y = out.as<T>();
  const int64_t n = bc.numel, rank = bc.rank;
  parallel_for(n, n > kParallelMin ? 1 : INT64_MAX, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      int64_t rem = i, oc = 0, oa = 0, ob = 0;
      for (int64_t k = rank - 1; k >= 0; --k) {
        const int64_t idx = rem % os[k];
        rem /= os[k];
        oc += idx * sc[k];
        oa += idx * sa[k];
        ob += idx * sb[k];
      }
      y[i] = c[oc] != T(0) ? a[oa] : b[ob];
    }
  });
}

template <class T>
void gather_kernel(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  const int64_t outer = l.push.get(push::kIndexRows), inner = l.push.get(push::kIndexWidth),
                n = l.push.get(push::kIndexCount);
  const struct { int64_t size; } a{l.push.get(push::kIndexAxis)};
  const int32_t* ids = in[1].as<int32_t>();
  for (int64_t j = 0; j < n; ++j) check_index(d.op, ids[j], j, a.size);
  const T* x = in[0].as<T>();
  T* y = out.as<T>();
  if (d.op == Op::gather) {
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < n; ++j) {
        std::memcpy(y + (o * n + j) * inner, x + (o * a.size + ids[j]) * inner, size_t(inner) * sizeof(T));
      }
    }
    return;
  }
  std::fill(y, y + outer * a.size * inner, T(0));
  for (int64_t o = 0; o < outer; ++o) {  // indices in order: a deterministic accumulation
    for (int64_t j = 0; j < n; ++j) {
      const T* src = x + (o * n + j) * inner;
      T* dst = y + (o * a.size + ids[j]) * inner;
      for (int64_t i = 0; i < inner; ++i) dst[i] += src[i];
    }
  }
}

// Row r: max and log-sum-exp in double accumulation, the row's exp terms in T.
template <class T>
double row_lse(const T* x, int64_t c) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < c; ++j) m = std::max(m, x[j]);
  double s = 0;
  for (int64_t j = 0; j < c; ++j) s += double(std::exp(x[j] - m));
  return double(m) + std::log(s);
}

template <class T>
void cross_entropy_kernel(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  const auto& a = std::get<OneHotAttrs>(d.attrs);
  const int64_t rows = l.push.get(push::kIndexRows), c = l.push.get(push::kIndexWidth);
  const T* x = in[0].as<T>();
  const int32_t* t = in[1].as<int32_t>();
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (t[r] == a.ignore_index) continue;
    check_index(d.op, t[r], r, c);
    ++count;
  }
  const int64_t min_parallel = rows * c > kParallelMin ? 1 : INT64_MAX;
  if (d.op == Op::softmax_cross_entropy) {
    std::vector<double> loss(size_t(rows), 0.0);
    parallel_for(rows, min_parallel, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        if (t[r] != a.ignore_index) loss[size_t(r)] = row_lse(x + r * c, c) - double(x[r * c + t[r]]);
      }
    });
    double s = 0;
    for (double v : loss) s += v;  // in row order: reproducible
    out.as<T>()[0] = count ? T(s / double(count)) : T(0);
    return;
  }
  const double scale = count ? double(in[2].as<T>()[0]) / double(count) : 0.0;
  T* y = out.as<T>();
  parallel_for(rows, min_parallel, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      T* yr = y + r * c;
      if (t[r] == a.ignore_index) {
        std::fill(yr, yr + c, T(0));
        continue;
      }
      const T* xr = x + r * c;
      const T lse = T(row_lse(xr, c));
      for (int64_t j = 0; j < c; ++j) yr[j] = T(scale) * std::exp(xr[j] - lse);
      yr[t[r]] -= T(scale);
    }
  });
}

// Each row's k largest entries, largest first: NaN above every number, equal values (-0 and +0
// among them) by the lower index; then their indices as values of T.
template <class T>
void top_k_kernel(const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  const int64_t rows = l.push.get(push::kIndexRows), n = l.push.get(push::kIndexWidth),
                k = l.push.get(push::kIndexCount);
  const T* x = in[0].as<T>();
  T* y = out.as<T>();
  parallel_for(rows, rows * n > kParallelMin ? 1 : INT64_MAX, [&](int64_t lo, int64_t hi) {
    std::vector<int32_t> order(static_cast<size_t>(n));
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * n;
      auto before = [xr](int32_t i, int32_t j) {
        const T a = xr[i], b = xr[j];
        if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && (!std::isnan(b) || i < j);
        return a != b ? a > b : i < j;
      };
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      for (int64_t j = 0; j < k; ++j) {
        y[r * 2 * k + j] = xr[order[size_t(j)]];
        y[r * 2 * k + k + j] = T(order[size_t(j)]);
      }
    }
  });
}

}  // namespace

template <class T>
void workload_index(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  if (d.op == Op::where) return where_kernel<T>(l, in, out);
  if (d.op == Op::top_k) return top_k_kernel<T>(l, in, out);
  if (d.op == Op::gather || d.op == Op::gather_backward) return gather_kernel<T>(d, l, in, out);
  if (d.op == Op::softmax_cross_entropy || d.op == Op::softmax_cross_entropy_backward)
    return cross_entropy_kernel<T>(d, l, in, out);
  kernel_error(d.op, "not a workload index op");
}

template void workload_index<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void workload_index<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);

}  // namespace meganeura::cpu
