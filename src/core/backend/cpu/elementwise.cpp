#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backend/cpu/elementwise_loops.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/reduce_runs.h"
#include "meganeura/gguf.h"

namespace meganeura::cpu {

Broadcast::Broadcast(const PushConstants& p) {
  using L = ElementwiseLayout;
  numel = p.get(L::kNumel);
  rank = p.get(L::kRank);
  inputs = p.get(L::kInputs);
  for (int64_t d = 0; d < rank; ++d) ext[d] = p.get(L::kExtents + size_t(d));
  for (int64_t i = 0; i < inputs; ++i) {
    const uint32_t mask = p.get(L::kMasks + size_t(i / 4)) >> ((i % 4) * 8);
    int64_t s = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (mask >> d & 1) {
        stride[i][d] = s;
        s *= ext[d];
      }
    }
  }
}

bool Broadcast::spans_all(int64_t input) const {
  for (int64_t d = 0; d < rank; ++d) {
    if (!stride[input][d]) return false;
  }
  return true;
}

template <class T>
void unary(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  const T* x = in[0].as<T>();
  T* y = out.as<T>();
  const int64_t n = l.push.get(ElementwiseLayout::kNumel);
  if (d.op == Op::copy || d.op == Op::detach) {
    if (x != y) std::memmove(y, x, size_t(n) * sizeof(T));
    return;
  }
  T p0 = 0, p1 = 0;
  if (d.op == Op::affine) {
    const auto& a = std::get<AffineAttrs>(d.attrs);
    p0 = T(a.scale), p1 = T(a.shift);
  } else if (d.op == Op::clip_coef) {
    p0 = T(std::get<ClipAttrs>(d.attrs).max_norm);
  }
  const auto loop = unary_loop<T>(d.op);
  parallel_for(n, (n > kParallelMin) ? 1 : INT64_MAX,
               [&](int64_t lo, int64_t hi) { loop(p0, p1, x + lo, y + lo, hi - lo); });
}

template <class T>
void binary(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  const T* a = in[0].as<T>();
  const T* b = in[1].as<T>();
  T* y = out.as<T>();
  const Broadcast bc(l.push);
  const int64_t n = bc.numel;
  const int64_t min_parallel = n > kParallelMin ? 1 : INT64_MAX;
  const auto loop = binary_loop<T>(d.op);
  if (bc.spans_all(0) && bc.spans_all(1)) {
    parallel_for(n, min_parallel, [&](int64_t lo, int64_t hi) { loop(a + lo, true, b + lo, true, y + lo, hi - lo); });
    return;
  }
  // General broadcasting: walk rows of the innermost (collapsed) dimension; each input's inner
  // stride is 1 (contiguous) or 0 (broadcast).
  const int64_t* sa = bc.stride[0];
  const int64_t* sb = bc.stride[1];
  const int64_t* os = bc.ext;
  const int64_t rank = bc.rank;
  const int64_t inner = rank ? os[rank - 1] : 1, rows = inner ? n / inner : 0;
  const int64_t ia = rank ? sa[rank - 1] : 0, ib = rank ? sb[rank - 1] : 0;
  parallel_for(rows, min_parallel, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      int64_t oa = 0, ob = 0, rem = r;
      for (int64_t k = rank - 2; k >= 0; --k) {
        const int64_t idx = rem % os[k];
        rem /= os[k];
        oa += idx * sa[k];
        ob += idx * sb[k];
      }
      T* yr = y + r * inner;
      loop(a + oa, ia != 0, b + ob, ib != 0, yr, inner);
      if (!ia && !ib) std::fill(yr, yr + inner, yr[0]);
    }
  });
}

// ---- reductions -----
namespace {

constexpr int64_t kColumns = 256;  // columns summed side by side (reductions over a leading axis)

}  // namespace

template <class T>
void reduce(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  const T* x = in[0].as<T>();
  T* y = out.as<T>();
  const PushConstants& p = l.push;
  const int64_t outer = p.get(push::kReduceOuter), len = p.get(push::kReduceLen), inner = p.get(push::kReduceInner);
  if (d.op == Op::softmax || d.op == Op::log_softmax) {
    const bool log_form = d.op == Op::log_softmax;
    // exp in the tensor's own precision, once per element; terms below e^-80 (masked scores)
    // are zero: they cannot change a sum that includes the maximum's 1, and libm's underflow
    // path for them is slow.
    auto exp_shifted = [](T v) { return v < T(-80) ? T(0) : std::exp(v); };
    parallel_for(outer * inner, (outer * inner * len > kParallelMin) ? 1 : INT64_MAX, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t base = (r / inner) * len * inner + r % inner;
        T m = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < len; ++j) m = std::max(m, x[base + j * inner]);
        double s = 0;
        if (log_form) {
          for (int64_t j = 0; j < len; ++j) s += double(exp_shifted(x[base + j * inner] - m));
          const T lse = m + T(std::log(s));
          for (int64_t j = 0; j < len; ++j) y[base + j * inner] = x[base + j * inner] - lse;
        } else {  // y may alias x: each element is read before it is written
          for (int64_t j = 0; j < len; ++j) s += double(y[base + j * inner] = exp_shifted(x[base + j * inner] - m));
          const T inv = T(1 / s);
          for (int64_t j = 0; j < len; ++j) y[base + j * inner] *= inv;
        }
      }
    });
    return;
  }
  const bool is_max = d.op == Op::max;
  const double count = double(p.get(push::kReduceCount));
  auto finish = [&](double acc) { return T(d.op == Op::mean ? acc / count : acc); };
  const int64_t rank = p.get(push::kReduceRank);
  if (rank == 0) {  // reduced axes contiguous: [outer, len, inner] (the common case)
    parallel_for(outer * inner, (outer * inner * len > kParallelMin) ? 1 : INT64_MAX,
                 [&](int64_t begin_, int64_t end_) {
                   if (inner == 1) {  // rows of the last axis
                     for (int64_t r = begin_; r < end_; ++r) y[r] = finish(run_total<T>(x + r * len, len, is_max));
                     return;
                   }
                   // Columns: a slice of consecutive columns of one outer index at a time, the reduced axis
                   // walked in memory order and each column's sum kept in its own slot (the same order of
                   // additions per column as one column at a time, without a stride-`inner` walk per column).
                   double acc[kColumns];
                   for (int64_t r = begin_; r < end_;) {
                     const int64_t o = r / inner, i0 = r % inner, cols = std::min({end_ - r, inner - i0, kColumns});
                     std::fill(acc, acc + cols, is_max ? -INFINITY : 0.0);
                     const T* q = x + o * len * inner + i0;
                     for (int64_t j = 0; j < len; ++j, q += inner) accumulate_run(acc, q, cols, is_max);
                     for (int64_t c = 0; c < cols; ++c) y[r + c] = finish(acc[c]);
                     r += cols;
                   }
                 });
    return;
  }
  // General (reduced axes not contiguous, e.g. batch norm's statistics over N, H and W of NCHW).
  const ReduceShape shape(p);
  const int64_t n_out = p.get(ElementwiseLayout::kNumel);
  std::vector<double> acc(size_t(n_out), is_max ? -INFINITY : 0.0);
  struct InPlace {  // the input's runs are read where they are
    const T* x;
    const T* values(int64_t offset, int64_t want, int64_t* got) const {
      *got = want;
      return x + offset;
    }
  };
  reduce_runs<T>(shape, is_max, acc.data(), [&] { return InPlace{x}; });
  for (int64_t i = 0; i < n_out; ++i) y[i] = finish(acc[size_t(i)]);
}

// ---- casts between stored dtypes -----
float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) {
        man <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
namespace {
uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = uint16_t((x >> 16) & 0x8000);
  int32_t exp = int32_t((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00 | (man ? 0x200 : 0));
  if (exp >= 31) return uint16_t(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return sign;
    man |= 0x800000;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = (uint32_t(exp) << 10) | (man >> 13), rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // round to nearest even
  return uint16_t(sign | h);
}
float bf16_to_float(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}
double load(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::f32: return double(static_cast<const float*>(p)[i]);
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::f16: return double(half_to_float(static_cast<const uint16_t*>(p)[i]));
    case DType::bf16: return double(bf16_to_float(static_cast<const uint16_t*>(p)[i]));
    case DType::i32: return double(static_cast<const int32_t*>(p)[i]);
    case DType::u32: return double(static_cast<const uint32_t*>(p)[i]);
    case DType::q8_0:
    case DType::q4_0: break;  // whole blocks: convert_values
  }
  return 0;
}
void store(DType t, void* p, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = float(v); break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = float_to_half(float(v)); break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = float_to_bf16(float(v)); break;
    case DType::i32: static_cast<int32_t*>(p)[i] = int32_t(std::trunc(v)); break;
    case DType::u32: static_cast<uint32_t*>(p)[i] = uint32_t(std::trunc(v)); break;
    case DType::q8_0:
    case DType::q4_0: break;  // whole blocks: convert_values
  }
}
}  // namespace

void convert(DType from, const void* src, DType to, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store(to, dst, i, load(from, src, i));
}

}  // namespace meganeura::cpu

void meganeura::convert_values(DType from, const void* src, DType to, void* dst, int64_t n) {
  if (!dtype_is_block(from) && !dtype_is_block(to)) return cpu::convert(from, src, to, dst, n);
  const auto ggml = [](DType t) { return t == DType::q8_0 ? io::GgmlType::q8_0 : io::GgmlType::q4_0; };
  std::vector<float> f(static_cast<size_t>(n));
  if (dtype_is_block(from))
    io::dequantize(uint32_t(ggml(from)), {static_cast<const std::byte*>(src), storage_bytes(from, n)}, f);
  else
    cpu::convert(from, src, DType::f32, f.data(), n);
  if (!dtype_is_block(to)) return cpu::convert(DType::f32, f.data(), to, dst, n);
  const std::vector<std::byte> blocks = io::quantize(ggml(to), f);
  std::memcpy(dst, blocks.data(), blocks.size());
}

namespace meganeura::cpu {

void cast(const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  convert(in[0].stored, in[0].data, out.stored, out.data, l.push.get(ElementwiseLayout::kNumel));
}

template void unary<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void unary<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void binary<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void binary<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void reduce<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void reduce<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);

}  // namespace meganeura::cpu
