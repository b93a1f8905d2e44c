#include <cstdint>
// Matmul, convolution and pooling. GEMMs go through gemm.h (oneDNN for f32, OpenBLAS for the
// f64 oracle); convolution is im2col + GEMM, with 1x1 stride-1 convolutions reading the input
// directly, except f32 convolutions that oneDNN's primitives run faster (onednn_conv.h).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_gemm.h"
#if MEGANEURA_ONEDNN
#include "backend/cpu/onednn_conv.h"
#endif
#include "backend/cpu/parallel.h"

namespace meganeura::cpu {
namespace {

struct ConvGeom {
  int64_t n, c, h, w, o, kh, kw, oh, ow, groups, cg, og;
  const ConvAttrs* a;  // stride, padding and dilation (from the push block too)
};

// The convolution's geometry and attributes from its launch's push words.
ConvGeom geometry(const PushConstants& p, ConvAttrs& a) {
  int64_t v[10];
  for (size_t i = 0; i < 10; ++i) v[i] = p.get(push::kConv + i);
  for (size_t i = 0; i < 2; ++i) {
    a.stride[i] = p.get(push::kConvStride + i);
    a.pad[i] = p.get(push::kConvPad + i);
    a.dilation[i] = p.get(push::kConvDilation + i);
  }
  a.groups = v[9];
  return ConvGeom{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[1] / v[9], v[4] / v[9], &a};
}

bool is_pointwise(const ConvGeom& g) {
  const ConvAttrs& a = *g.a;
  return g.kh == 1 && g.kw == 1 && a.stride[0] == 1 && a.stride[1] == 1 && a.pad[0] == 0 && a.pad[1] == 0;
}

// col[(ci*kh + i)*kw + j][oy*ow + ox] = x[ci][oy*s - p + i*d][ox*s - p + j*d] (0 outside).
template <class T>
void im2col(const ConvGeom& g, const T* x, T* col) {
  const ConvAttrs& a = *g.a;
  const int64_t rows = g.cg * g.kh * g.kw;
  parallel_for(rows, (rows * g.oh * g.ow > kParallelMin) ? 1 : INT64_MAX, [&](int64_t begin_, int64_t end_) {
    for (int64_t r = begin_; r < end_; ++r) {
      const int64_t ci = r / (g.kh * g.kw), i = (r / g.kw) % g.kh, j = r % g.kw;
      T* dst = col + r * g.oh * g.ow;
      const T* src = x + ci * g.h * g.w;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        const int64_t iy = oy * a.stride[0] - a.pad[0] + i * a.dilation[0];
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const int64_t ix = ox * a.stride[1] - a.pad[1] + j * a.dilation[1];
          dst[oy * g.ow + ox] = (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) ? src[iy * g.w + ix] : T(0);
        }
      }
    }
  });
}

// The adjoint of im2col: accumulates columns back into x (which the caller zeroed).
template <class T>
void col2im(const ConvGeom& g, const T* col, T* x) {
  const ConvAttrs& a = *g.a;
  parallel_for(g.cg, (g.cg * g.h * g.w > kParallelMin) ? 1 : INT64_MAX, [&](int64_t begin_, int64_t end_) {
    for (int64_t ci = begin_; ci < end_; ++ci) {  // channels are disjoint: safe to split
      T* dst = x + ci * g.h * g.w;
      for (int64_t i = 0; i < g.kh; ++i) {
        for (int64_t j = 0; j < g.kw; ++j) {
          const T* src = col + ((ci * g.kh + i) * g.kw + j) * g.oh * g.ow;
          for (int64_t oy = 0; oy < g.oh; ++oy) {
            const int64_t iy = oy * a.stride[0] - a.pad[0] + i * a.dilation[0];
            if (iy < 0 || iy >= g.h) continue;
            for (int64_t ox = 0; ox < g.ow; ++ox) {
              const int64_t ix = ox * a.stride[1] - a.pad[1] + j * a.dilation[1];
              if (ix >= 0 && ix < g.w) dst[iy * g.w + ix] += src[oy * g.ow + ox];
            }
          }
        }
      }
    }
  });
}

// Calls fn(n, group, columns) for every image and group, with the im2col matrix
// [cg*kh*kw, oh*ow] of that slice (the input itself for pointwise convolutions).
template <class T, class F>
void for_each_column_block(Op op, const ConvGeom& g, const T* x, F&& fn) {
  T* col = is_pointwise(g) ? nullptr
                           : reinterpret_cast<T*>(workspace(op, size_t(g.cg * g.kh * g.kw * g.oh * g.ow) * sizeof(T)));
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t gr = 0; gr < g.groups; ++gr) {
      const T* xg = x + (n * g.c + gr * g.cg) * g.h * g.w;
      if (col) im2col(g, xg, col);
      fn(n, gr, col ? col : xg);
    }
  }
}

// The data gradient of a pointwise convolution, for a batch at least as large as the pool:
// whole images per pool thread, each a serial GEMM. Splitting every image's GEMM instead packs
// its gradient once per thread and synchronises once per image: measured 1.1-1.6x slower at
// 28x28 and 56x56 (ResNet-50); the forward and weight-gradient GEMMs measured no gain.
bool images_per_thread(const ConvGeom& g) {
  return is_pointwise(g) && g.groups == 1 && thread_count() > 1 && g.n >= thread_count() &&
         g.c * g.o * g.h * g.w > kParallelMin;
}

template <class T>
void conv_forward(const ConvGeom& g, const T* x, const T* w, T* y) {
  const int64_t k = g.cg * g.kh * g.kw, p = g.oh * g.ow;
  for_each_column_block(Op::conv2d, g, x, [&](int64_t n, int64_t gr, const T* cols) {
    gemm(false, false, g.og, p, k, T(1), w + gr * g.og * k, k, cols, p, T(0), y + (n * g.o + gr * g.og) * p, p);
  });
}

template <class T>
void conv_backward_input(const ConvGeom& g, const T* dy, const T* w, T* dx) {
  const int64_t k = g.cg * g.kh * g.kw, p = g.oh * g.ow;
  if (images_per_thread(g)) {
    parallel_for(g.n, 1, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n)
        gemm_serial(true, false, g.c, p, g.o, T(1), w, k, dy + n * g.o * p, p, T(0), dx + n * g.c * p, p);
    });
    return;
  }
  std::fill(dx, dx + g.n * g.c * g.h * g.w, T(0));
  T* col =
      is_pointwise(g) ? nullptr : reinterpret_cast<T*>(workspace(Op::conv2d_backward_input, size_t(k * p) * sizeof(T)));
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t gr = 0; gr < g.groups; ++gr) {
      T* dxg = dx + (n * g.c + gr * g.cg) * g.h * g.w;
      T* target = col ? col : dxg;
      gemm(true, false, k, p, g.og, T(1), w + gr * g.og * k, k, dy + (n * g.o + gr * g.og) * p, p, T(0), target, p);
      if (col) col2im(g, col, dxg);
    }
  }
}

template <class T>
void conv_backward_weight(const ConvGeom& g, const T* x, const T* dy, T* dw) {
  const int64_t k = g.cg * g.kh * g.kw, p = g.oh * g.ow;
  std::fill(dw, dw + g.o * k, T(0));
  for_each_column_block(Op::conv2d_backward_weight, g, x, [&](int64_t n, int64_t gr, const T* cols) {
    gemm(false, true, g.og, k, p, T(1), dy + (n * g.o + gr * g.og) * p, p, cols, p, T(1), dw + gr * g.og * k, k);
  });
}

}  // namespace

bool reads_16bit(const Dispatch& d, const KernelLaunch& l, size_t input) {
  if (d.op == Op::embedding) return input == 0;
  if ((d.op != Op::matmul && d.op != Op::matmul_epilogue) || input != 1) return false;
  // y = x w^T with x in f32 and one w for every batch (b_batched 0, trans_a 0, trans_b 1)
  return l.push.get(push::kMatmul + 5) == 0 && l.push.get(push::kMatmul + 6) == 0 && l.push.get(push::kMatmul + 7) != 0;
}

template <class T>
void linalg(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  if (d.op == Op::matmul_q) {
    const int64_t m = l.push.get(push::kMatmul), n = l.push.get(push::kMatmul + 1), k = l.push.get(push::kMatmul + 2);
    return matmul_q(in[1].stored, in[0].as<T>(), in[1].as<const std::byte>(), out.as<T>(), m, n, k);
  }
  matmul<T>(l.push, in[0], in[1], out);
}

namespace {
thread_local std::byte* g_workspace = nullptr;
thread_local size_t g_workspace_bytes = 0;
}  // namespace

void set_workspace(std::byte* data, size_t bytes) {
  g_workspace = data;
  g_workspace_bytes = bytes;
}
std::byte* workspace(Op op, size_t bytes) {
  if (bytes > g_workspace_bytes) {
    kernel_error(op, "needs " + std::to_string(bytes) + " bytes of workspace, the schedule planned " +
                         std::to_string(g_workspace_bytes));
  }
  return g_workspace;
}

template <class T>
void matmul(const PushConstants& p, const Arg& x, const Arg& y, const Arg& out) {
  const Arg in[2] = {x, y};
  int64_t w[8];
  for (size_t i = 0; i < 8; ++i) w[i] = p.get(push::kMatmul + i);
  const int64_t m = w[0], n = w[1], k = w[2], batch = w[3];
  const bool a_batched = w[4], b_batched = w[5];
  struct {
    bool trans_a, trans_b;
  } a{w[6] != 0, w[7] != 0};
  if (in[1].stored == DType::f16 || in[1].stored == DType::bf16) {  // y = x w^T, w in 16 bits (reads_16bit)
    if constexpr (std::is_same_v<T, float>) {
      return matmul_q(in[1].stored, in[0].as<T>(), in[1].as<const std::byte>(), out.as<T>(), a_batched ? batch * m : m,
                      n, k);
    }
  }
  const T* A = in[0].as<T>();
  const T* B = in[1].as<T>();
  T* C = out.as<T>();
  const int64_t lda = a.trans_a ? m : k, ldb = a.trans_b ? k : n;  // row-major A [m,k] or [k,m], B [k,n] or [n,k]
  if (a_batched && !b_batched && !a.trans_a) {                     // shared weights: one tall GEMM
    gemm(false, a.trans_b, batch * m, n, k, T(1), A, lda, B, ldb, T(0), C, n);
    return;
  }
  auto one = [&](int64_t i, bool serial) {
    const T* ai = A + (a_batched ? i * m * k : 0);
    const T* bi = B + (b_batched ? i * k * n : 0);
    if (serial)
      gemm_serial(a.trans_a, a.trans_b, m, n, k, T(1), ai, lda, bi, ldb, T(0), C + i * m * n, n);
    else
      gemm(a.trans_a, a.trans_b, m, n, k, T(1), ai, lda, bi, ldb, T(0), C + i * m * n, n);
  };
  // Many small products (attention's per-head GEMMs): one whole product per pool thread.
  // Products large enough to split on their own keep the row/column split.
  const int64_t work = m * n * k;
  if (batch > 1 && work < (int64_t(1) << 21) && batch * work >= (int64_t(1) << 18)) {
    parallel_for(batch, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) one(i, true);
    });
    return;
  }
  for (int64_t i = 0; i < batch; ++i) one(i, false);
}

template <class T>
void conv(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  ConvAttrs a;
  const ConvGeom g = geometry(l.push, a);
#if MEGANEURA_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (f32_gemm() == F32Gemm::onednn) {
      const Shape xs{g.n, g.c, g.h, g.w}, ws{g.o, g.cg, g.kh, g.kw}, ys{g.n, g.o, g.oh, g.ow};
      if (onednn_conv_applies(d.op, xs, ws, a)) {
        onednn_conv(d.op, xs, ws, ys, a, in[0].as<float>(), in[1].as<float>(), out.as<float>());
        return;
      }
    }
  }
#endif
  // An if-chain, not a switch: the compiler checks the families (CpuKernel) for completeness;
  // within one, a missing op fails every backend's op-coverage test.
  if (d.op == Op::conv2d) return conv_forward(g, in[0].as<T>(), in[1].as<T>(), out.as<T>());
  if (d.op == Op::conv2d_backward_input) return conv_backward_input(g, in[0].as<T>(), in[1].as<T>(), out.as<T>());
  if (d.op == Op::conv2d_backward_weight) return conv_backward_weight(g, in[0].as<T>(), in[1].as<T>(), out.as<T>());
  kernel_error(d.op, "not a convolution");
}

template <class T>
void pool(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  int64_t v[12];
  for (size_t i = 0; i < 12; ++i) v[i] = l.push.get(push::kPool + i);
  const int64_t planes = v[0] * v[1], h = v[2], w = v[3], oh = v[10], ow = v[11];
  if (d.op == Op::upsample_nearest2x) {
    const T* x = in[0].as<T>();
    T* y = out.as<T>();
    parallel_for(planes, (planes * oh * ow > kParallelMin) ? 1 : INT64_MAX, [&](int64_t begin_, int64_t end_) {
      for (int64_t p = begin_; p < end_; ++p) {
        for (int64_t i = 0; i < 2 * h; ++i) {
          for (int64_t j = 0; j < 2 * w; ++j) y[(p * 2 * h + i) * 2 * w + j] = x[(p * h + i / 2) * w + j / 2];
        }
      }
    });
    return;
  }
  struct {
    int64_t kernel[2], stride[2], pad[2];
  } a{{v[4], v[5]}, {v[6], v[7]}, {v[8], v[9]}};
  const bool backward = d.op == Op::max_pool2d_backward || d.op == Op::avg_pool2d_backward;
  const int64_t kk = a.kernel[0] * a.kernel[1];
  if (backward) std::fill(out.as<T>(), out.as<T>() + planes * h * w, T(0));
  if (d.op == Op::max_pool2d || d.op == Op::max_pool2d_backward) {
    // The first maximum of each window (a NaN never wins; an empty window gives -inf), found
    // in T (exact for a maximum); the backward pass adds the output gradient at that position.
    const T* x = in[0].as<T>();
    const T* dy = backward ? in[1].as<T>() : nullptr;
    T* y = out.as<T>();
    parallel_for(planes, (planes * h * w > kParallelMin) ? 1 : INT64_MAX, [&](int64_t begin_, int64_t end_) {
      for (int64_t p = begin_; p < end_; ++p) {
        const T* xp = x + p * h * w;
        for (int64_t oy = 0; oy < oh; ++oy) {
          const int64_t y0 = oy * a.stride[0] - a.pad[0];
          const int64_t i0 = std::max<int64_t>(y0, 0), i1 = std::min(y0 + a.kernel[0], h);
          for (int64_t ox = 0; ox < ow; ++ox) {
            const int64_t x0 = ox * a.stride[1] - a.pad[1];
            const int64_t j0 = std::max<int64_t>(x0, 0), j1 = std::min(x0 + a.kernel[1], w);
            T best = -std::numeric_limits<T>::infinity();
            int64_t arg = -1;
            for (int64_t i = i0; i < i1; ++i) {
              const T* row = xp + i * w;
              for (int64_t j = j0; j < j1; ++j) {
                if (row[j] > best) {
                  best = row[j];
                  arg = i * w + j;
                }
              }
            }
            const int64_t o = (p * oh + oy) * ow + ox;
            if (!backward)
              y[o] = best;
            else if (arg >= 0)
              y[p * h * w + arg] += dy[o];
          }
        }
      }
    });
    return;
  }
  // Average pooling: the window's mean over its full size (padding counts as zeros).
  parallel_for(planes, (planes * h * w > kParallelMin) ? 1 : INT64_MAX, [&](int64_t begin_, int64_t end_) {
    for (int64_t p = begin_; p < end_; ++p) {
      for (int64_t oy = 0; oy < oh; ++oy) {
        for (int64_t ox = 0; ox < ow; ++ox) {
          const int64_t y0 = oy * a.stride[0] - a.pad[0], x0 = ox * a.stride[1] - a.pad[1];
          const int64_t o = (p * oh + oy) * ow + ox;
          double acc = 0;
          for (int64_t i = std::max<int64_t>(y0, 0); i < std::min(y0 + a.kernel[0], h); ++i) {
            for (int64_t j = std::max<int64_t>(x0, 0); j < std::min(x0 + a.kernel[1], w); ++j) {
              const int64_t idx = (p * h + i) * w + j;
              if (backward)
                out.as<T>()[idx] += in[0].as<T>()[o] / T(kk);
              else
                acc += double(in[0].as<T>()[idx]);
            }
          }
          if (!backward) out.as<T>()[o] = T(acc / double(kk));
        }
      }
    }
  });
}

template void matmul<float>(const PushConstants&, const Arg&, const Arg&, const Arg&);
template void matmul<double>(const PushConstants&, const Arg&, const Arg&, const Arg&);
template void linalg<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void linalg<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void conv<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void conv<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void pool<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void pool<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);

}  // namespace meganeura::cpu
