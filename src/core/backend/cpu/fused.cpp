// Kernels of the fused ops (created by the rewrite passes). They read their sizes from the
// launch's push constants (schedule.h), not from tensor shapes, and need no scratch memory.
// Values are computed in T (float, or double for the oracle); reductions accumulate in double,
// as the primitive reductions do.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "backend/cpu/elementwise_loops.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/reduce_runs.h"

namespace meganeura::cpu {
namespace {

constexpr int64_t kBlock = 256;  // elements evaluated per program step

template <class T>
void unary_block(const FusedInstr& f, const T* x, T* y, int64_t n) {  // y may be x
  unary_loop<T>(f.op)(T(f.a), T(f.b), x, y, n);
}

template <class T>
void binary_block(Op op, const T* a, bool va, const T* b, bool vb, T* y, int64_t n) {
  binary_loop<T>(op)(a, va, b, vb, y, n);
}

// A fused program over the push block's (collapsed) domain; src[i] is input i.
template <class T>
class Evaluator {
 public:
  // Per-thread buffers: a row of values per stack entry and per stored output.
  struct Block {
    alignas(64) T stack[kFusedMaxStack][kBlock];
    alignas(64) T stored[kFusedMaxOutputs][kBlock];
  };

  Evaluator(const std::vector<FusedInstr>& code, const PushConstants& p, const T* const* src)
      : code_(code), bc_(p), src_(src) {
    from_stack_ =
        std::none_of(code.begin(), code.end(), [](const FusedInstr& f) { return f.kind == FusedInstr::store; });
    inner_ = bc_.rank ? bc_.ext[bc_.rank - 1] : 1;
    for (int64_t i = 0; i < bc_.inputs; ++i) {
      full_[i] = bc_.spans_all(i);
      scalar_[i] = std::none_of(bc_.stride[i], bc_.stride[i] + bc_.rank, [](int64_t s) { return s != 0; });
    }
  }
  int64_t numel() const { return bc_.numel; }
  int64_t inner() const { return inner_; }  // elements of a (collapsed) row

  // Runs the program over `len` elements from column j0 of each of the rows r0 .. r0 + nr - 1
  // (several rows only when they are whole rows). Returns the program's result (a program
  // without `store`); stored output k is left in b.stored[k].
  const T* run(int64_t r0, int64_t j0, int64_t len, int64_t nr, Block& b) const {
    const int64_t total = len * nr, rank = bc_.rank;
    // at[k]: where stack entry k's values are: an input read in place where its block is
    // contiguous, else its own row of b.stack (inputs gathered, results written). vec[k] is
    // false for a value uniform over the block (a constant, a broadcast scalar or channel
    // value), held as one element until it meets a varying one.
    const T* at[kFusedMaxStack];
    bool vec[kFusedMaxStack];
    size_t sp = 0;
    for (const FusedInstr& f : code_) {
      switch (f.kind) {
        case FusedInstr::input: {
          const int64_t i = f.index;
          const T* s = src_[i];
          T* x = b.stack[sp];
          vec[sp] = true;
          if (full_[i]) {  // rows r0.. are contiguous
            at[sp] = s + r0 * inner_ + j0;
          } else if (rank && bc_.stride[i][rank - 1]) {
            if (nr == 1) {
              at[sp] = s + row_offset(i, r0) + j0;
            } else {
              for (int64_t k = 0; k < nr; ++k)
                std::memcpy(x + k * len, s + row_offset(i, r0 + k) + j0, size_t(len) * sizeof(T));
              at[sp] = x;
            }
          } else if (nr == 1 || scalar_[i]) {
            at[sp] = s + row_offset(i, r0);
            vec[sp] = false;
          } else {
            for (int64_t k = 0; k < nr; ++k) std::fill(x + k * len, x + (k + 1) * len, s[row_offset(i, r0 + k)]);
            at[sp] = x;
          }
          ++sp;
          break;
        }
        case FusedInstr::constant:
          b.stack[sp][0] = T(f.a);
          at[sp] = b.stack[sp];
          vec[sp++] = false;
          break;
        case FusedInstr::unary:
          unary_block<T>(f, at[sp - 1], b.stack[sp - 1], vec[sp - 1] ? total : 1);
          at[sp - 1] = b.stack[sp - 1];
          break;
        case FusedInstr::binary:
          binary_block<T>(f.op, at[sp - 2], vec[sp - 2], at[sp - 1], vec[sp - 1], b.stack[sp - 2], total);
          at[sp - 2] = b.stack[sp - 2];
          vec[sp - 2] = vec[sp - 2] || vec[sp - 1];
          --sp;
          break;
        case FusedInstr::store:
          --sp;
          if (vec[sp])
            std::memcpy(b.stored[f.index], at[sp], size_t(total) * sizeof(T));
          else
            std::fill(b.stored[f.index], b.stored[f.index] + total, *at[sp]);
          break;
        case FusedInstr::load:
          at[sp] = b.stored[f.index];
          vec[sp++] = true;
          break;
      }
    }
    if (!from_stack_) return nullptr;
    if (!vec[0]) {  // a program of uniform values only
      std::fill(b.stack[0], b.stack[0] + total, *at[0]);
      at[0] = b.stack[0];
    }
    return at[0];
  }

  bool from_stack() const { return from_stack_; }

 private:
  int64_t row_offset(int64_t i, int64_t r) const {  // of input i's row r
    int64_t rem = r, o = 0;
    for (int64_t d = bc_.rank - 2; d >= 0; --d) {
      o += (rem % bc_.ext[d]) * bc_.stride[i][d];
      rem /= bc_.ext[d];
    }
    return o;
  }

  const std::vector<FusedInstr>& code_;
  const Broadcast bc_;
  const T* const* src_;
  bool from_stack_ = true;  // a program without `store` leaves its one result on the stack
  int64_t inner_ = 1;
  bool full_[kFusedMaxInputs] = {};    // spans every dimension: rows are contiguous in memory
  bool scalar_[kFusedMaxInputs] = {};  // spans none: one value everywhere
};

// Evaluates `code` over the push block's domain into dst[0] (a program without `store`) or
// dst[k] for each stored output k. Each block's outputs are written after all of its inputs
// were read, so an output may alias a same-shaped input.
template <class T>
void evaluate(const std::vector<FusedInstr>& code, const PushConstants& p, const T* const* src, T* const* dst) {
  const size_t n_out = fused_outputs(code);
  const Evaluator<T> e(code, p, src);
  const int64_t numel = e.numel(), inner = e.inner();
  if (numel == 0) return;
  const int64_t rows = numel / inner;
  // A work item is up to kBlock elements: part of one long row, or several whole short rows
  // (so each instruction's dispatch is paid for at least kBlock elements).
  const int64_t rows_per_item = inner >= kBlock ? 1 : kBlock / inner;
  const int64_t blocks_per_row = (inner + kBlock - 1) / kBlock;
  const int64_t items = (rows + rows_per_item - 1) / rows_per_item * blocks_per_row;
  parallel_for(items, numel > kParallelMin ? 1 : INT64_MAX, [&](int64_t lo, int64_t hi) {
    typename Evaluator<T>::Block b;
    for (int64_t it = lo; it < hi; ++it) {
      const int64_t r0 = it / blocks_per_row * rows_per_item, j0 = (it % blocks_per_row) * kBlock;
      const int64_t len = std::min(kBlock, inner - j0), nr = std::min(rows_per_item, rows - r0);
      const T* result = e.run(r0, j0, len, nr, b);
      for (size_t k = 0; k < n_out; ++k) {
        std::memcpy(dst[k] + r0 * inner + j0, result ? result : b.stored[k], size_t(len * nr) * sizeof(T));
      }
    }
  });
}

// The program's values reduced over `axes` of its domain as they are computed, a block at a
// time (no buffer of the whole domain), by the walk the primitive reductions use.
template <class T>
void fused_reduce(const FusedAttrs& a, const PushConstants& p, const T* const* src, T* y) {
  const Evaluator<T> e(a.code, p, src);
  if (!e.from_stack()) kernel_error(Op::fused_reduce, "a reduced program has no stored outputs");
  const ReduceShape shape(p);
  const int64_t n_out = p.get(push::kReduceOuter) * p.get(push::kReduceInner);
  const uint32_t kind = p.get(push::kReduceKind);
  const bool is_max = kind == 2;
  std::vector<double> acc(size_t(n_out), is_max ? -INFINITY : 0.0);
  const int64_t inner = e.inner();
  struct Part {  // a block's values at a time: never past the end of a (collapsed) row
    const Evaluator<T>* e;
    int64_t inner;
    std::unique_ptr<typename Evaluator<T>::Block> b = std::make_unique<typename Evaluator<T>::Block>();
    const T* values(int64_t offset, int64_t want, int64_t* got) {
      const int64_t r = offset / inner, j = offset % inner;
      *got = std::min({want, kBlock, inner - j});
      return e->run(r, j, *got, 1, *b);
    }
  };
  if (shape.elements() > 0) reduce_runs<T>(shape, is_max, acc.data(), [&] { return Part{&e, inner}; });
  const double count = n_out ? double(shape.elements()) / double(n_out) : 1.0;
  for (int64_t i = 0; i < n_out; ++i) y[i] = T(kind == 1 ? acc[size_t(i)] / count : acc[size_t(i)]);
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
void fused(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const std::vector<Arg>& outs) {
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
      fused_reduce<T>(std::get<FusedAttrs>(d.attrs), l.push, src, out.as<T>());
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

template void fused<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const std::vector<Arg>&);
template void fused<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const std::vector<Arg>&);

}  // namespace meganeura::cpu
