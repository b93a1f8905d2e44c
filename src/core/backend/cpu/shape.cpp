#include <cstdint>
// Movement, indexing and sequence ops: strided copies and gathers.
#include <cmath>
#include <cstring>
#include <numbers>

#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"

namespace meganeura::cpu {
namespace {

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

// y[i] = x[src(i)] where src is an affine map given by per-output-axis input strides.
template <class T>
void strided_copy(const T* x, T* y, const Shape& os, const std::vector<int64_t>& in_strides, int64_t base) {
  const int64_t n = numel(os), rank = int64_t(os.size());
  const int64_t inner = rank ? os.back() : 1, rows = inner ? n / inner : 0;
  const int64_t is = rank ? in_strides.back() : 0;
  parallel_for(rows, (n > kParallelMin) ? 1 : INT64_MAX, [&](int64_t begin_, int64_t end_) {
    for (int64_t r = begin_; r < end_; ++r) {
      int64_t off = base, rem = r;
      for (int64_t k = rank - 2; k >= 0; --k) {
        off += (rem % os[size_t(k)]) * in_strides[size_t(k)];
        rem /= os[size_t(k)];
      }
      T* yr = y + r * inner;
      for (int64_t j = 0; j < inner; ++j) yr[j] = x[off + j * is];
    }
  });
}

}  // namespace

template <class T>
void movement(const Dispatch& d, const std::vector<Arg>& in, const Arg& out) {
  const T* x = in[0].as<T>();
  T* y = out.as<T>();
  const Shape& xs = in[0].shape();
  const Shape& os = out.shape();
  switch (d.op) {
    case Op::reshape:
      if (x != y) std::memmove(y, x, size_t(out.n()) * sizeof(T));
      return;
    case Op::permute: {
      const auto& perm = std::get<PermuteAttrs>(d.attrs).perm;
      auto xst = strides_of(xs);
      std::vector<int64_t> st(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) st[i] = xst[size_t(perm[i])];
      strided_copy(x, y, os, st, 0);
      return;
    }
    case Op::slice: {
      const auto& s = std::get<SliceAttrs>(d.attrs);
      auto st = strides_of(xs);
      int64_t base = 0;
      for (size_t i = 0; i < st.size(); ++i) base += s.starts[i] * st[i];
      strided_copy(x, y, os, st, base);
      return;
    }
    case Op::broadcast_to:
      strided_copy(x, y, os, broadcast_strides(xs, os), 0);
      return;
    case Op::pad: {
      const auto& p = std::get<PadAttrs>(d.attrs);
      std::fill(y, y + out.n(), T(0));
      auto ost = strides_of(os);
      int64_t base = 0;
      for (size_t i = 0; i < ost.size(); ++i) base += p.before[i] * ost[i];
      // Scatter: walk the input, write at the shifted output position.
      const int64_t n = in[0].n(), rank = int64_t(xs.size());
      for (int64_t i = 0; i < n; ++i) {
        int64_t rem = i, off = base;
        for (int64_t k = rank - 1; k >= 0; --k) {
          off += (rem % xs[size_t(k)]) * ost[size_t(k)];
          rem /= xs[size_t(k)];
        }
        y[off] = x[i];
      }
      return;
    }
    case Op::concat: {
      const int64_t axis = std::get<AxisAttrs>(d.attrs).axis;
      int64_t outer = 1, inner = 1;
      for (int64_t i = 0; i < int64_t(os.size()); ++i) {
        if (i < axis) outer *= os[size_t(i)];
        else if (i > axis) inner *= os[size_t(i)];
      }
      const int64_t out_row = os[size_t(axis)] * inner;
      int64_t off = 0;
      for (const Arg& a : in) {
        const int64_t row = a.shape()[size_t(axis)] * inner;
        const T* src = a.as<T>();
        for (int64_t o = 0; o < outer; ++o) std::memcpy(y + o * out_row + off, src + o * row, size_t(row) * sizeof(T));
        off += row;
      }
      return;
    }
    default: kernel_error(d.op, "not a movement op");
  }
}

template <class T>
void index(const Dispatch& d, const std::vector<Arg>& in, const Arg& out) {
  switch (d.op) {
    case Op::embedding: {
      const int64_t rows = in[0].shape()[0], dim = in[0].shape()[1], n = in[1].n();
      const T* table = in[0].as<T>();
      const int32_t* ids = in[1].as<int32_t>();
      for (int64_t i = 0; i < n; ++i) {
        if (ids[i] < 0 || ids[i] >= rows) {
          kernel_error(d.op, "id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                 " out of range [0, " + std::to_string(rows) + ")");
        }
        std::memcpy(out.as<T>() + i * dim, table + int64_t(ids[i]) * dim, size_t(dim) * sizeof(T));
      }
      return;
    }
    case Op::embedding_backward: {
      const int64_t rows = out.shape()[0], dim = out.shape()[1], n = in[1].n();
      T* g = out.as<T>();
      std::fill(g, g + out.n(), T(0));
      const int32_t* ids = in[1].as<int32_t>();
      for (int64_t i = 0; i < n; ++i) {  // sequential: deterministic accumulation order
        if (ids[i] < 0 || ids[i] >= rows) kernel_error(d.op, "id " + std::to_string(ids[i]) + " out of range");
        const T* src = in[0].as<T>() + i * dim;
        T* dst = g + int64_t(ids[i]) * dim;
        for (int64_t j = 0; j < dim; ++j) dst[j] += src[j];
      }
      return;
    }
    case Op::one_hot: {
      const auto& a = std::get<OneHotAttrs>(d.attrs);
      T* y = out.as<T>();
      std::fill(y, y + out.n(), T(0));
      const int32_t* ids = in[0].as<int32_t>();
      for (int64_t i = 0, n = in[0].n(); i < n; ++i) {
        if (ids[i] == a.ignore_index) continue;
        if (ids[i] < 0 || ids[i] >= a.classes) {
          kernel_error(d.op, "class " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                 " out of range [0, " + std::to_string(a.classes) + ")");
        }
        y[i * a.classes + ids[i]] = T(1);
      }
      return;
    }
    case Op::where: case Op::gather: case Op::gather_backward: case Op::softmax_cross_entropy:
    case Op::softmax_cross_entropy_backward:
      return workload_index<T>(d, in, out);
    default: kernel_error(d.op, "not an index op");
  }
}

// A scalar step counter as stored (f32, f64 in the oracle, or i32), exactly.
double counter_value(const Arg& a) {
  double v = 0;
  convert(a.t->stored, a.data, DType::f64, &v, 1);
  return v;
}

template <class T>
void sequence(const Dispatch& d, const std::vector<Arg>& in, const Arg& out) {
  if (d.op == Op::attention_fused || d.op == Op::attention_fused_backward) return attention_tiled<T>(d, in, out);
  const T* x = in[0].as<T>();
  T* y = out.as<T>();
  const Shape& s = out.shape();
  switch (d.op) {
    case Op::rope: {
      const auto& a = std::get<RopeAttrs>(d.attrs);
      const int64_t dim = s.back(), seq = s[s.size() - 2], half = dim / 2;
      const int64_t rows = out.n() / dim;
      const double sign = a.inverse ? -1.0 : 1.0;
      std::vector<double> cs(size_t(seq * half)), sn(size_t(seq * half));  // per (position, pair)
      for (int64_t pos = 0; pos < seq; ++pos) {
        for (int64_t i = 0; i < half; ++i) {
          const double angle = sign * double(pos) * std::pow(a.theta, -2.0 * double(i) / double(dim));
          cs[size_t(pos * half + i)] = std::cos(angle);
          sn[size_t(pos * half + i)] = std::sin(angle);
        }
      }
      parallel_for(rows, (out.n() > kParallelMin) ? 1 : INT64_MAX, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          const double* c = cs.data() + (r % seq) * half;
          const double* sv = sn.data() + (r % seq) * half;
          const T* xr = x + r * dim;
          T* yr = y + r * dim;
          for (int64_t i = 0; i < half; ++i) {
            const double x1 = double(xr[i]), x2 = double(xr[i + half]);
            yr[i] = T(x1 * c[i] - x2 * sv[i]);
            yr[i + half] = T(x2 * c[i] + x1 * sv[i]);
          }
        }
      });
      return;
    }
    case Op::causal_mask: {
      const T fill = T(std::get<MaskAttrs>(d.attrs).fill);
      const int64_t sk = s.back(), sq = s[s.size() - 2], offset = sk - sq;
      const int64_t rows = out.n() / sk;
      parallel_for(rows, (out.n() > kParallelMin) ? 1 : INT64_MAX, [&](int64_t begin_, int64_t end_) {
        for (int64_t r = begin_; r < end_; ++r) {
          const int64_t i = r % sq;
          for (int64_t j = 0; j < sk; ++j) y[r * sk + j] = j > i + offset ? fill : x[r * sk + j];
        }
      });
      return;
    }
    case Op::lr_schedule: {
      const auto& a = std::get<ScheduleAttrs>(d.attrs);
      const double t = counter_value(in[0]) + 1;  // the step being taken, counting from 1
      double lr = a.base_lr;
      if (a.warmup > 0 && t <= double(a.warmup)) {
        lr = a.base_lr * t / double(a.warmup);
      } else if (a.total > 0) {
        const double progress = std::min(1.0, (t - double(a.warmup)) / double(a.total - a.warmup));
        lr = a.min_lr + (a.base_lr - a.min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
      }
      y[0] = T(lr);
      return;
    }
    case Op::bias_correction: {
      const auto& a = std::get<BiasCorrectionAttrs>(d.attrs);
      const double t = counter_value(in[0]) + 1;
      // 1 - beta^t as -expm1(t ln beta): no cancellation when beta^t is close to 1.
      const double c = a.beta > 0 ? -std::expm1(t * std::log(a.beta)) : 1.0;
      y[0] = T(std::pow(c, a.power));
      return;
    }
    case Op::increment: {
      const int32_t n = in[0].as<int32_t>()[0];
      if (n == INT32_MAX) kernel_error(d.op, "counter overflows i32");
      out.as<int32_t>()[0] = n + 1;
      return;
    }
    default: kernel_error(d.op, "not a sequence op");
  }
}

template void movement<float>(const Dispatch&, const std::vector<Arg>&, const Arg&);
template void movement<double>(const Dispatch&, const std::vector<Arg>&, const Arg&);
template void index<float>(const Dispatch&, const std::vector<Arg>&, const Arg&);
template void index<double>(const Dispatch&, const std::vector<Arg>&, const Arg&);
template void sequence<float>(const Dispatch&, const std::vector<Arg>&, const Arg&);
template void sequence<double>(const Dispatch&, const std::vector<Arg>&, const Arg&);

}  // namespace meganeura::cpu
