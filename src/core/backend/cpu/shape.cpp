#include <cstdint>
// Movement, indexing and sequence ops: strided copies and gathers.
#include <cmath>
#include <cstring>
#include <numbers>

#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/quant_gemm.h"

namespace meganeura::cpu {
namespace {

// Row-major element strides of `rank` extents.
void strides_of(const int64_t* ext, int64_t rank, int64_t* st) {
  for (int64_t i = rank - 1, s = 1; i >= 0; --i) {
    st[i] = s;
    s *= ext[i];
  }
}

// y[i] = x[src(i)] where src is an affine map given by per-output-axis input strides.
template <class T>
void strided_copy(const T* x, T* y, const int64_t* os, int64_t rank, const int64_t* in_strides, int64_t base) {
  int64_t n = 1;
  for (int64_t k = 0; k < rank; ++k) n *= os[k];
  const int64_t inner = rank ? os[rank - 1] : 1, rows = inner ? n / inner : 0;
  const int64_t is = rank ? in_strides[rank - 1] : 0;
  parallel_for(rows, (n > kParallelMin) ? 1 : INT64_MAX, [&](int64_t begin_, int64_t end_) {
    for (int64_t r = begin_; r < end_; ++r) {
      int64_t off = base, rem = r;
      for (int64_t k = rank - 2; k >= 0; --k) {
        off += (rem % os[k]) * in_strides[k];
        rem /= os[k];
      }
      T* yr = y + r * inner;
      for (int64_t j = 0; j < inner; ++j) yr[j] = x[off + j * is];
    }
  });
}

// The permute/slice/pad block: rank, input and output extents, one word per dimension.
struct Movement {
  int64_t rank, in[push::kMaxRank], out[push::kMaxRank], param[push::kMaxRank], in_st[push::kMaxRank],
      out_st[push::kMaxRank];
  explicit Movement(const PushConstants& p) : rank(p.get(push::kMoveRank)) {
    for (int64_t i = 0; i < rank; ++i) {
      in[i] = p.get(push::kMoveIn + size_t(i));
      out[i] = p.get(push::kMoveOut + size_t(i));
      param[i] = p.get(push::kMoveParam + size_t(i));
    }
    strides_of(in, rank, in_st);
    strides_of(out, rank, out_st);
  }
};

}  // namespace

template <class T>
void movement(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  const T* x = in[0].as<T>();
  T* y = out.as<T>();
  const PushConstants& p = l.push;
  if (d.op == Op::reshape) {
    if (x != y) std::memmove(y, x, size_t(p.get(ElementwiseLayout::kNumel)) * sizeof(T));
    return;
  }
  if (d.op == Op::permute) {
    const Movement m(p);
    int64_t st[push::kMaxRank];
    for (int64_t i = 0; i < m.rank; ++i) st[i] = m.in_st[m.param[i]];
    strided_copy(x, y, m.out, m.rank, st, 0);
    return;
  }
  if (d.op == Op::slice) {
    const Movement m(p);
    int64_t base = 0;
    for (int64_t i = 0; i < m.rank; ++i) base += m.param[i] * m.in_st[i];
    strided_copy(x, y, m.out, m.rank, m.in_st, base);
    return;
  }
  if (d.op == Op::broadcast_to) {
    const Broadcast bc(p);
    strided_copy(x, y, bc.ext, bc.rank, bc.stride[0], 0);
    return;
  }
  if (d.op == Op::pad) {
    const Movement m(p);
    int64_t n_out = 1, n = 1;
    for (int64_t i = 0; i < m.rank; ++i) {
      n_out *= m.out[i];
      n *= m.in[i];
    }
    std::fill(y, y + n_out, T(0));
    int64_t base = 0;
    for (int64_t i = 0; i < m.rank; ++i) base += m.param[i] * m.out_st[i];
    // Scatter: walk the input, write at the shifted output position.
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = i, off = base;
      for (int64_t k = m.rank - 1; k >= 0; --k) {
        off += (rem % m.in[k]) * m.out_st[k];
        rem /= m.in[k];
      }
      y[off] = x[i];
    }
    return;
  }
  if (d.op == Op::concat) {
    const int64_t outer = p.get(push::kConcatOuter), inner = p.get(push::kConcatInner);
    const size_t inputs = p.get(push::kConcatInputs);
    int64_t out_row = 0;
    for (size_t k = 0; k < inputs; ++k) out_row += int64_t(p.get(push::kConcatLens + k)) * inner;
    int64_t off = 0;
    for (size_t k = 0; k < inputs; ++k) {
      const int64_t row = int64_t(p.get(push::kConcatLens + k)) * inner;
      const T* src = in[k].as<T>();
      for (int64_t o = 0; o < outer; ++o) std::memcpy(y + o * out_row + off, src + o * row, size_t(row) * sizeof(T));
      off += row;
    }
    return;
  }
  kernel_error(d.op, "not a movement op");
}

template <class T>
void index(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  const int64_t rows = l.push.get(push::kIndexRows), dim = l.push.get(push::kIndexWidth),
                n = l.push.get(push::kIndexCount);
  if (d.op == Op::embedding) {
    const T* table = in[0].as<T>();
    const int32_t* ids = in[1].as<int32_t>();
    const bool decoded = in[0].stored != DType::f32 && in[0].stored != DType::f64;  // a block format, f16 or bf16
    const uint64_t row_bytes = storage_bytes(in[0].stored, dim);
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] >= rows) {
        kernel_error(d.op, "id " + std::to_string(ids[i]) + " at position " + std::to_string(i) + " out of range [0, " +
                               std::to_string(rows) + ")");
      }
      if (decoded)
        decode_row(in[0].stored, in[0].as<const std::byte>() + uint64_t(ids[i]) * row_bytes, out.as<T>() + i * dim,
                   dim);
      else
        std::memcpy(out.as<T>() + i * dim, table + int64_t(ids[i]) * dim, size_t(dim) * sizeof(T));
    }
    return;
  }
  if (d.op == Op::embedding_backward) {
    T* g = out.as<T>();
    std::fill(g, g + rows * dim, T(0));
    const int32_t* ids = in[1].as<int32_t>();
    for (int64_t i = 0; i < n; ++i) {  // sequential: deterministic accumulation order
      if (ids[i] < 0 || ids[i] >= rows) kernel_error(d.op, "id " + std::to_string(ids[i]) + " out of range");
      const T* src = in[0].as<T>() + i * dim;
      T* dst = g + int64_t(ids[i]) * dim;
      for (int64_t j = 0; j < dim; ++j) dst[j] += src[j];
    }
    return;
  }
  if (d.op == Op::one_hot) {
    const int64_t ignore = std::get<OneHotAttrs>(d.attrs).ignore_index, classes = dim;
    T* y = out.as<T>();
    std::fill(y, y + n * classes, T(0));
    const int32_t* ids = in[0].as<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] == ignore) continue;
      if (ids[i] < 0 || ids[i] >= classes) {
        kernel_error(d.op, "class " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                               " out of range [0, " + std::to_string(classes) + ")");
      }
      y[i * classes + ids[i]] = T(1);
    }
    return;
  }
  if (d.op == Op::where || d.op == Op::top_k || d.op == Op::gather || d.op == Op::gather_backward ||
      d.op == Op::softmax_cross_entropy || d.op == Op::softmax_cross_entropy_backward)
    return workload_index<T>(d, l, in, out);
  kernel_error(d.op, "not an index op");
}

// A scalar step counter as stored (f32, f64 in the oracle, or i32), exactly.
double counter_value(const Arg& a) {
  double v = 0;
  convert(a.stored, a.data, DType::f64, &v, 1);
  return v;
}

template <class T>
void sequence(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  if (d.op == Op::attention_fused || d.op == Op::attention_fused_backward) return attention_tiled<T>(d, l, in, out);
  if (d.op == Op::kv_cache_write || d.op == Op::cached_attention || d.op == Op::rope_at)
    return kv_cache<T>(d, l, in, out);
  const T* x = in[0].as<T>();
  T* y = out.as<T>();
  const int64_t rows = l.push.get(push::kSeqRows), len = l.push.get(push::kSeqLen),
                positions = l.push.get(push::kSeqPositions);
  if (d.op == Op::rope) {
    const auto& a = std::get<RopeAttrs>(d.attrs);
    const int64_t dim = len, seq = positions, half = dim / 2;
    const double sign = a.inverse ? -1.0 : 1.0;
    std::vector<double> cs(size_t(seq * half)), sn(size_t(seq * half));  // per (position, pair)
    for (int64_t pos = 0; pos < seq; ++pos) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = sign * double(pos) * rope_frequency(a, i, dim);
        cs[size_t(pos * half + i)] = std::cos(angle);
        sn[size_t(pos * half + i)] = std::sin(angle);
      }
    }
    parallel_for(rows, (rows * dim > kParallelMin) ? 1 : INT64_MAX, [&](int64_t lo, int64_t hi) {
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
  if (d.op == Op::causal_mask) {
    const T fill = T(std::get<MaskAttrs>(d.attrs).fill);
    const int64_t sk = len, sq = positions, offset = sk - sq;
    parallel_for(rows, (rows * sk > kParallelMin) ? 1 : INT64_MAX, [&](int64_t begin_, int64_t end_) {
      for (int64_t r = begin_; r < end_; ++r) {
        const int64_t i = r % sq;
        for (int64_t j = 0; j < sk; ++j) y[r * sk + j] = j > i + offset ? fill : x[r * sk + j];
      }
    });
    return;
  }
  if (d.op == Op::lr_schedule) {
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
  if (d.op == Op::bias_correction) {
    const auto& a = std::get<BiasCorrectionAttrs>(d.attrs);
    const double t = counter_value(in[0]) + 1;
    // 1 - beta^t as -expm1(t ln beta): no cancellation when beta^t is close to 1.
    const double c = a.beta > 0 ? -std::expm1(t * std::log(a.beta)) : 1.0;
    y[0] = T(std::pow(c, a.power));
    return;
  }
  if (d.op == Op::increment) {
    const int32_t n = in[0].as<int32_t>()[0];
    if (n == INT32_MAX) kernel_error(d.op, "counter overflows i32");
    out.as<int32_t>()[0] = n + 1;
    return;
  }
  kernel_error(d.op, "not a sequence op");
}

template void movement<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void movement<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void index<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void index<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void sequence<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void sequence<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);

}  // namespace meganeura::cpu
