// Kernels of the fused ops (created by the rewrite passes). They read their sizes from the
// launch's push constants (schedule.h), not from tensor shapes, and take scratch memory from
// the workspace the schedule planned. Values are computed in T (float, or double for the
// oracle); reductions accumulate in double, as the primitive reductions do.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"

namespace meganeura::cpu {
namespace {

constexpr int64_t kBlock = 256;  // elements evaluated per program step

template <class T>
void unary_block(const FusedInstr& f, T* __restrict x, int64_t n) {
  constexpr double kSqrt2OverPi = 0.7978845608028654, kInvSqrt2 = 0.7071067811865476, kInvSqrt2Pi = 0.3989422804014327;
  switch (f.op) {
    case Op::copy: case Op::detach: return;
    case Op::neg: for (int64_t j = 0; j < n; ++j) x[j] = -x[j]; return;
    case Op::exp: for (int64_t j = 0; j < n; ++j) x[j] = std::exp(x[j]); return;
    case Op::log: for (int64_t j = 0; j < n; ++j) x[j] = std::log(x[j]); return;
    case Op::sqrt: for (int64_t j = 0; j < n; ++j) x[j] = std::sqrt(x[j]); return;
    case Op::rsqrt: for (int64_t j = 0; j < n; ++j) x[j] = T(1) / std::sqrt(x[j]); return;
    case Op::abs: for (int64_t j = 0; j < n; ++j) x[j] = std::abs(x[j]); return;
    case Op::tanh: for (int64_t j = 0; j < n; ++j) x[j] = std::tanh(x[j]); return;
    case Op::sigmoid: for (int64_t j = 0; j < n; ++j) x[j] = T(1) / (T(1) + std::exp(-x[j])); return;
    case Op::relu: for (int64_t j = 0; j < n; ++j) x[j] = x[j] > T(0) ? x[j] : T(0); return;
    case Op::silu: for (int64_t j = 0; j < n; ++j) x[j] = x[j] / (T(1) + std::exp(-x[j])); return;
    case Op::gelu_tanh:
      for (int64_t j = 0; j < n; ++j) {
        T v = x[j], t = std::tanh(T(kSqrt2OverPi) * (v + T(0.044715) * v * v * v));
        x[j] = T(0.5) * v * (T(1) + t);
      }
      return;
    case Op::gelu_erf: for (int64_t j = 0; j < n; ++j) x[j] = T(0.5) * x[j] * (T(1) + std::erf(x[j] * T(kInvSqrt2))); return;
    case Op::gelu_tanh_grad:
      for (int64_t j = 0; j < n; ++j) {
        T v = x[j], t = std::tanh(T(kSqrt2OverPi) * (v + T(0.044715) * v * v * v));
        x[j] = T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * 0.044715) * v * v);
      }
      return;
    case Op::gelu_erf_grad:
      for (int64_t j = 0; j < n; ++j) {
        T v = x[j];
        x[j] = T(0.5) * (T(1) + std::erf(v * T(kInvSqrt2))) + v * T(kInvSqrt2Pi) * std::exp(T(-0.5) * v * v);
      }
      return;
    case Op::affine: {
      const T s = T(f.a), b = T(f.b);
      for (int64_t j = 0; j < n; ++j) x[j] = s * x[j] + b;
      return;
    }
    case Op::sign: for (int64_t j = 0; j < n; ++j) x[j] = x[j] > T(0) ? T(1) : x[j] < T(0) ? T(-1) : T(0); return;
    case Op::positive_mask: for (int64_t j = 0; j < n; ++j) x[j] = x[j] > T(0) ? T(1) : T(0); return;
    case Op::clip_coef: for (int64_t j = 0; j < n; ++j) x[j] = std::min(T(1), T(f.a) / (x[j] + T(1e-6))); return;
    case Op::sin: for (int64_t j = 0; j < n; ++j) x[j] = std::sin(x[j]); return;
    case Op::cos: for (int64_t j = 0; j < n; ++j) x[j] = std::cos(x[j]); return;
    default: kernel_error(f.op, "not an elementwise op of a fused program");
  }
}

template <class T>
void binary_block(Op op, T* __restrict a, const T* __restrict b, int64_t n) {  // distinct stack rows
  switch (op) {
    case Op::add: for (int64_t j = 0; j < n; ++j) a[j] = a[j] + b[j]; return;
    case Op::sub: for (int64_t j = 0; j < n; ++j) a[j] = a[j] - b[j]; return;
    case Op::mul: for (int64_t j = 0; j < n; ++j) a[j] = a[j] * b[j]; return;
    case Op::div: for (int64_t j = 0; j < n; ++j) a[j] = a[j] / b[j]; return;
    case Op::equal: for (int64_t j = 0; j < n; ++j) a[j] = a[j] == b[j] ? T(1) : T(0); return;
    case Op::maximum: for (int64_t j = 0; j < n; ++j) a[j] = a[j] < b[j] ? b[j] : a[j]; return;
    case Op::less: for (int64_t j = 0; j < n; ++j) a[j] = a[j] < b[j] ? T(1) : T(0); return;
    default: kernel_error(op, "not a binary op of a fused program");
  }
}

// Evaluates `code` over the push block's (collapsed) domain into dst[0] (a program without
// `store`) or dst[k] for each stored output k; src[i] is input i. Each block's outputs are
// written after all of its inputs were read, so an output may alias a same-shaped input.
template <class T>
void evaluate(const std::vector<FusedInstr>& code, const PushConstants& p, const T* const* src, T* const* dst) {
  const size_t n_out = fused_outputs(code);
  // a program without `store` leaves its one result on the stack
  const bool from_stack = std::none_of(code.begin(), code.end(), [](const FusedInstr& f) { return f.kind == FusedInstr::store; });
  const Broadcast bc(p);
  const int64_t numel = bc.numel, rank = bc.rank, n_in = bc.inputs;
  if (numel == 0) return;
  const int64_t* ext = bc.ext;
  const auto& stride = bc.stride;
  const int64_t inner = rank ? ext[rank - 1] : 1, rows = numel / inner;
  // A work item is up to kBlock elements: part of one long row, or several whole short rows
  // (so each instruction's dispatch is paid for at least kBlock elements).
  const int64_t rows_per_item = inner >= kBlock ? 1 : kBlock / inner;
  const int64_t blocks_per_row = (inner + kBlock - 1) / kBlock;
  const int64_t items = (rows + rows_per_item - 1) / rows_per_item * blocks_per_row;
  bool full[kFusedMaxInputs] = {};  // spans every dimension: rows are contiguous in memory
  for (int64_t i = 0; i < n_in; ++i) full[i] = bc.spans_all(i);
  auto row_offset = [&](int64_t i, int64_t r) {
    int64_t rem = r, o = 0;
    for (int64_t d = rank - 2; d >= 0; --d) {
      o += (rem % ext[d]) * stride[i][d];
      rem /= ext[d];
    }
    return o;
  };
  parallel_for(items, numel > kParallelMin ? 1 : INT64_MAX, [&](int64_t lo, int64_t hi) {
    alignas(64) T stack[kFusedMaxStack][kBlock];
    alignas(64) T stored[kFusedMaxOutputs][kBlock];
    for (int64_t it = lo; it < hi; ++it) {
      const int64_t r0 = it / blocks_per_row * rows_per_item, j0 = (it % blocks_per_row) * kBlock;
      const int64_t len = std::min(kBlock, inner - j0), nr = std::min(rows_per_item, rows - r0);
      const int64_t total = len * nr;
      size_t sp = 0;
      for (const FusedInstr& f : code) {
        switch (f.kind) {
          case FusedInstr::input: {
            const int64_t i = f.index;
            const T* s = src[i];
            T* x = stack[sp++];
            if (full[i]) {  // rows r0.. are contiguous: one copy
              std::memcpy(x, s + r0 * inner + j0, size_t(total) * sizeof(T));
            } else if (rank && stride[i][rank - 1]) {
              for (int64_t k = 0; k < nr; ++k) std::memcpy(x + k * len, s + row_offset(i, r0 + k) + j0, size_t(len) * sizeof(T));
            } else {
              for (int64_t k = 0; k < nr; ++k) std::fill(x + k * len, x + (k + 1) * len, s[row_offset(i, r0 + k)]);
            }
            break;
          }
          case FusedInstr::constant: std::fill(stack[sp], stack[sp] + total, T(f.a)); ++sp; break;
          case FusedInstr::unary: unary_block<T>(f, stack[sp - 1], total); break;
          case FusedInstr::binary: binary_block<T>(f.op, stack[sp - 2], stack[sp - 1], total); --sp; break;
          case FusedInstr::store: std::memcpy(stored[f.index], stack[--sp], size_t(total) * sizeof(T)); break;
          case FusedInstr::load: std::memcpy(stack[sp++], stored[f.index], size_t(total) * sizeof(T)); break;
        }
      }
      // several rows per item only when a row is shorter than a block: then they are whole rows
      for (size_t k = 0; k < n_out; ++k) {
        std::memcpy(dst[k] + r0 * inner + j0, from_stack ? stack[0] : stored[k], size_t(total) * sizeof(T));
      }
    }
  });
}

template <class T>
void fused_reduce(const FusedAttrs& a, const PushConstants& p, const T* const* src, T* scratch, T* y) {
  evaluate<T>(a.code, p, src, &scratch);
  const int64_t outer = p.get(push::kReduceOuter), len = p.get(push::kReduceLen), inner = p.get(push::kReduceInner);
  const uint32_t kind = p.get(push::kReduceKind);
  parallel_for(outer * inner, (outer * inner * len > kParallelMin) ? 1 : INT64_MAX, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* x = scratch + (r / inner) * len * inner + r % inner;
      double acc = kind == 2 ? -INFINITY : 0.0;
      for (int64_t j = 0; j < len; ++j) acc = kind == 2 ? std::max(acc, double(x[j * inner])) : acc + double(x[j * inner]);
      y[r] = T(kind == 1 ? acc / double(len) : acc);
    }
  });
}

// Rows of the last axis: centre (layer norm), scale by the reciprocal RMS, then gamma, beta.
template <class T>
void norm(const PushConstants& p, const T* x, const T* gamma, const T* beta, T* y) {
  const int64_t rows = p.get(push::kRows), len = p.get(push::kLen);
  const bool center = p.get(push::kNormCenter);
  const double eps = p.get_f64(push::kNormEps);
  parallel_for(rows, rows * len > kParallelMin ? 1 : INT64_MAX, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * len;
      T* yr = y + r * len;
      double mu = 0;
      if (center) {
        for (int64_t j = 0; j < len; ++j) mu += double(xr[j]);
        mu /= double(len);
      }
      const T m = T(mu);
      double ss = 0;
      for (int64_t j = 0; j < len; ++j) ss += double((xr[j] - m) * (xr[j] - m));
      const T rstd = T(1) / std::sqrt(T(ss / double(len)) + T(eps));
      for (int64_t j = 0; j < len; ++j) {
        T v = (xr[j] - m) * rstd;
        if (gamma) v = v * gamma[j];
        if (beta) v = v + beta[j];
        yr[j] = v;
      }
    }
  });
}

// softmax(mask(x * scale)) over rows of the last axis; y may alias x (each element is read
// before it is written).
template <class T>
void softmax_scaled(const PushConstants& p, const T* x, T* y) {
  const int64_t rows = p.get(push::kRows), len = p.get(push::kLen), sq = p.get(push::kSoftmaxSq);
  const bool causal = p.get(push::kSoftmaxCausal);
  const T scale = T(p.get_f64(push::kSoftmaxScale)), fill = T(p.get_f64(push::kSoftmaxFill));
  const int64_t offset = len - sq;
  auto exp_shifted = [](T v) { return v < T(-80) ? T(0) : std::exp(v); };  // as the primitive softmax
  parallel_for(rows, rows * len > kParallelMin ? 1 : INT64_MAX, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * len;
      T* yr = y + r * len;
      const int64_t visible = causal ? std::min(len, r % sq + offset + 1) : len;
      T m = visible < len ? fill : -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < visible; ++j) m = std::max(m, xr[j] * scale);
      double s = 0;
      for (int64_t j = 0; j < visible; ++j) s += double(yr[j] = exp_shifted(xr[j] * scale - m));
      const T masked = exp_shifted(fill - m);
      for (int64_t j = visible; j < len; ++j) s += double(yr[j] = masked);
      const T inv = T(1 / s);
      for (int64_t j = 0; j < len; ++j) yr[j] *= inv;
    }
  });
}

}  // namespace

template <class T>
void fused(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const std::vector<Arg>& outs,
           std::byte* workspace) {
  const T* src[kFusedMaxInputs + 2] = {};
  const Arg& out = outs.at(0);
  T* y = out.as<T>();
  switch (d.op) {
    case Op::fused_elementwise: {
      for (size_t i = 0; i < in.size(); ++i) src[i] = in[i].as<T>();
      T* dst[kFusedMaxOutputs] = {};
      for (size_t k = 0; k < outs.size() && k < kFusedMaxOutputs; ++k) dst[k] = outs[k].as<T>();
      evaluate<T>(std::get<FusedAttrs>(d.attrs).code, l.push, src, dst);
      return;
    }
    case Op::fused_reduce: {
      for (size_t i = 0; i < in.size(); ++i) src[i] = in[i].as<T>();
      if (!workspace) kernel_error(d.op, "no workspace was provided");
      fused_reduce<T>(std::get<FusedAttrs>(d.attrs), l.push, src, reinterpret_cast<T*>(workspace), out.as<T>());
      return;
    }
    case Op::matmul_epilogue: {
      const auto& a = std::get<FusedAttrs>(d.attrs);
      matmul<T>(l.push, in[0], in[1], out);
      src[0] = out.as<T>();  // the product, read before each block is overwritten
      for (size_t i = 2; i < in.size(); ++i) src[i - 1] = in[i].as<T>();
      evaluate<T>(a.code, l.push, src, &y);
      return;
    }
    case Op::norm:
      norm<T>(l.push, in[0].as<T>(), in.size() > 1 ? in[1].as<T>() : nullptr, in.size() > 2 ? in[2].as<T>() : nullptr,
              out.as<T>());
      return;
    case Op::softmax_scaled: softmax_scaled<T>(l.push, in[0].as<T>(), out.as<T>()); return;
    default: kernel_error(d.op, "not a fused op");
  }
}

template void fused<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const std::vector<Arg>&, std::byte*);
template void fused<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const std::vector<Arg>&, std::byte*);

}  // namespace meganeura::cpu
