// The f32 GEMM (oneDNN and OpenBLAS), and the f32 matmul and convolution kernels (oneDNN's sgemm and
// convolution primitives), elementwise against f64 loops written here, independently of the
// kernels.
// Tolerance: a length-L f32 dot product of f32-rounded inputs is within (L + 2) * u * sum|a_k b_k|
// of the exact one (u = 2^-24, the standard forward bound for any summation order, blocked or
// not); each check allows twice that per element, plus 1e-6 for alpha/beta scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <span>

#include "backend/cpu/gemm.h"
#include "backend/cpu/parallel.h"
#include "graph/internal.h"
#include "meganeura/session.h"

namespace meganeura {
namespace {

using Vec = std::vector<double>;
constexpr double kU = 1.0 / (1 << 24);

Vec randn(int64_t n, uint64_t seed) {
  std::mt19937_64 r(seed);
  std::normal_distribution<double> d(0, 1);
  Vec v(static_cast<size_t>(n));
  for (auto& x : v) x = double(float(d(r)));  // exactly representable in f32
  return v;
}

// want/bound: the f64 result and sum|terms| per element; len: the products summed per element.
void expect_within(const std::vector<float>& got, const Vec& want, const Vec& bound, int64_t len,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 2 * double(len + 2) * kU * bound[i] + 1e-6;
    ASSERT_NEAR(double(got[i]), want[i], tol) << what << " at " << i;
  }
}

struct GemmCase {
  bool ta, tb;
  int64_t m, n, k, pad;
  float alpha, beta;
};

void check_gemm(const GemmCase& c) {
  // Leading dimensions `pad` wider than the matrices, to cover strided operands.
  const int64_t ar = c.ta ? c.k : c.m, ac = c.ta ? c.m : c.k, br = c.tb ? c.n : c.k, bc = c.tb ? c.k : c.n;
  const int64_t lda = ac + c.pad, ldb = bc + c.pad, ldc = c.n + c.pad;
  Vec A = randn(ar * lda, 1), B = randn(br * ldb, 2), C0 = randn(c.m * ldc, 3);
  std::vector<float> a(A.begin(), A.end()), b(B.begin(), B.end()), got(C0.begin(), C0.end());
  cpu::gemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb, c.beta, got.data(), ldc);
  Vec want(C0), bound(C0.size());
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double s = 0, t = 0;
      for (int64_t k = 0; k < c.k; ++k) {
        const double p = (c.ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)]) *
                         (c.tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)]);
        s += p;
        t += std::abs(p);
      }
      const size_t o = size_t(i * ldc + j);
      want[o] = c.alpha * s + c.beta * C0[o];
      bound[o] = std::abs(c.alpha) * t + std::abs(c.beta * C0[o]);
    }
  const std::string what = "gemm " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
                           (c.ta ? " ta" : "") + (c.tb ? " tb" : "");
  expect_within(got, want, bound, c.k, what);
}

// Every f32 GEMM library the build has: OpenBLAS always, oneDNN (the default) where built with
// it (MEGANEURA_ONEDNN).
TEST(GemmF32, EveryLibraryAgainstF64) {
  const cpu::F32Gemm built_default = MEGANEURA_ONEDNN ? cpu::F32Gemm::onednn : cpu::F32Gemm::openblas;
  ASSERT_EQ(cpu::f32_gemm(), built_default);
  std::vector<cpu::F32Gemm> libraries = {cpu::F32Gemm::openblas};
  if (MEGANEURA_ONEDNN) libraries.push_back(cpu::F32Gemm::onednn);
  for (cpu::F32Gemm lib : libraries) {
    cpu::set_f32_gemm(lib);
    SCOPED_TRACE(lib == cpu::F32Gemm::onednn ? "oneDNN" : "OpenBLAS");
    for (int threads : {1, 3}) {  // serial, and split over the pool (the large case)
      cpu::set_threads(threads);
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          check_gemm({ta, tb, 1, 1, 300, 0, 1.f, 0.f});
          check_gemm({ta, tb, 7, 13, 5, 0, 1.f, 0.f});
          check_gemm({ta, tb, 5, 3, 17, 4, -0.5f, 0.75f});
          check_gemm({ta, tb, 130, 129, 131, 1, 1.f, 1.f});  // above the split threshold: by rows
          check_gemm({ta, tb, 96, 300, 80, 3, 1.f, 0.5f});   // more columns than rows: by columns
          check_gemm({ta, tb, 3, 200, 4000, 0, 1.f, 0.f});   // few rows: split by columns
          check_gemm({ta, tb, 4, 6, 0, 0, 1.f, 0.5f});       // empty inner dimension: C = beta C
        }
    }
  }
  cpu::set_f32_gemm(built_default);
  cpu::set_threads(0);
}

struct Harness {
  Graph g;
  std::map<std::string, Vec> values;
  int threads = 0;
  Tensor in(const std::string& name, Shape s) {
    values[name] = randn(numel(s), values.size() * 31 + 7);
    return g.input(name, s);
  }
  std::vector<float> eval(Tensor y) {
    g.output("y", y);
    SessionOptions so;
    so.threads = threads;
    Session s(so);
    s.add(g);
    for (auto& [k, v] : values) s.set(k, std::span<const double>(v));
    s.run();
    auto f = s.get_f64("y");
    return std::vector<float>(f.begin(), f.end());  // f32 results: exact in f32
  }
};

TEST(GemmF32, BatchedMatmulAgainstF64) {
  struct C {
    int64_t b, m, k, n;
    bool ta, tb, b_batched;
  };
  for (C c : {C{16, 32, 32, 32, false, false, true}, C{16, 32, 32, 32, true, true, true},
              C{3, 1, 1, 9, false, true, true}, C{4, 7, 13, 5, false, true, false}, C{4, 7, 13, 5, true, false, false},
              C{2, 70, 80, 200, false, false, true}}) {
    Harness r;
    Tensor a = r.in("a", c.ta ? Shape{c.b, c.k, c.m} : Shape{c.b, c.m, c.k});
    Shape bs = c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n};
    if (c.b_batched) bs.insert(bs.begin(), c.b);
    Tensor bt = r.in("b", bs);
    std::vector<float> got = r.eval(matmul(a, bt, c.ta, c.tb));
    const Vec &A = r.values["a"], &B = r.values["b"];
    Vec want, bound;
    for (int64_t bb = 0; bb < c.b; ++bb)
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          double s = 0, t = 0;
          const int64_t boff = c.b_batched ? bb * c.k * c.n : 0;
          for (int64_t k = 0; k < c.k; ++k) {
            const double p =
                (c.ta ? A[size_t(bb * c.k * c.m + k * c.m + i)] : A[size_t(bb * c.m * c.k + i * c.k + k)]) *
                (c.tb ? B[size_t(boff + j * c.k + k)] : B[size_t(boff + k * c.n + j)]);
            s += p;
            t += std::abs(p);
          }
          want.push_back(s);
          bound.push_back(t);
        }
    expect_within(got, want, bound, c.k, "batched matmul b=" + std::to_string(c.b) + " m=" + std::to_string(c.m));
  }
}

struct ConvCase {
  int64_t n, c, h, w, o, kh, kw, s, p, d, g;
};

// Calls f(x index, w index, y index) for every product term of the convolution.
void for_each_term(const ConvCase& c, int64_t oh, int64_t ow, const std::function<void(size_t, size_t, size_t)>& f) {
  const int64_t cg = c.c / c.g, og = c.o / c.g;
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t o = 0; o < c.o; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j)
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ki = 0; ki < c.kh; ++ki)
              for (int64_t kj = 0; kj < c.kw; ++kj) {
                const int64_t y0 = i * c.s - c.p + ki * c.d, x0 = j * c.s - c.p + kj * c.d;
                if (y0 < 0 || y0 >= c.h || x0 < 0 || x0 >= c.w) continue;
                f(size_t(((n * c.c + (o / og) * cg + ci) * c.h + y0) * c.w + x0),
                  size_t(((o * cg + ci) * c.kh + ki) * c.kw + kj), size_t(((n * c.o + o) * oh + i) * ow + j));
              }
}

// 3x3/7x7 kernels without groups or dilation run on oneDNN's convolution primitives, the rest on
// im2col + oneDNN sgemm. Three threads: batches of 1 (one part, oneDNN threading it), 2 (two
// parts, one thread idle) and 5 (uneven parts; weight gradients summed over parts).
TEST(GemmF32, ConvolutionAllDirectionsAgainstF64) {
  for (ConvCase c :
       {ConvCase{5, 4, 9, 7, 6, 3, 3, 2, 1, 1,
                 1},  // oneDNN, uneven batch split {ConvCase{2, 3, 9, 8, 4, 3, 3, 1, 1, 1, 1},    // 3x3 same padding
        ConvCase{1, 4, 11, 10, 6, 3, 3, 2, 1, 2, 2},       // stride, dilation, groups
        ConvCase{2, 6, 7, 7, 6, 3, 3, 1, 1, 1, 6},         // depthwise
        ConvCase{2, 8, 6, 5, 4, 1, 1, 1, 0, 1, 1},         // pointwise (no im2col)
        ConvCase{1, 8, 9, 9, 4, 1, 1, 2, 0, 1, 1},         // strided 1x1
        ConvCase{1, 3, 20, 18, 8, 7, 7, 2, 3, 1, 1},       // stem-like 7x7 stride 2
        ConvCase{1, 5, 8, 9, 3, 3, 2, 1, 1, 1, 1},         // non-square kernel
        ConvCase{1, 32, 24, 24, 64, 3, 3, 1, 1, 1, 1}}) {  // large: blocked layouts
    const int64_t oh = (c.h + 2 * c.p - c.d * (c.kh - 1) - 1) / c.s + 1;
    const int64_t ow = (c.w + 2 * c.p - c.d * (c.kw - 1) - 1) / c.s + 1;
    const Shape xs{c.n, c.c, c.h, c.w}, ws{c.o, c.c / c.g, c.kh, c.kw}, ys{c.n, c.o, oh, ow};
    ConvAttrs at;
    at.stride[0] = at.stride[1] = c.s;
    at.pad[0] = at.pad[1] = c.p;
    at.dilation[0] = at.dilation[1] = c.d;
    at.groups = c.g;
    const std::string name = "conv c=" + std::to_string(c.c) + " o=" + std::to_string(c.o) +
                             " k=" + std::to_string(c.kh) + "x" + std::to_string(c.kw) + " s=" + std::to_string(c.s) +
                             " d=" + std::to_string(c.d) + " g=" + std::to_string(c.g);
    {  // forward: each output sums cg*kh*kw terms
      Harness r;
      r.threads = 3;
      Tensor x = r.in("x", xs), w = r.in("w", ws);
      std::vector<float> got = r.eval(conv2d(x, w, Conv2dOptions{c.s, c.s, c.p, c.p, c.d, c.d, c.g}));
      const Vec &X = r.values["x"], &W = r.values["w"];
      Vec want(size_t(numel(ys))), bound(want.size());
      for_each_term(c, oh, ow, [&](size_t xi, size_t wi, size_t yi) {
        want[yi] += X[xi] * W[wi];
        bound[yi] += std::abs(X[xi] * W[wi]);
      });
      expect_within(got, want, bound, c.c / c.g * c.kh * c.kw, name + " forward");
    }
    {  // gradient of the input: each element sums at most og*kh*kw terms
      Harness r;
      r.threads = 3;
      Tensor dy = r.in("dy", ys), w = r.in("w", ws);
      ConvAttrs a = at;
      a.grad_shape = xs;
      std::vector<float> got = r.eval(conv2d_backward_input(dy, w, a));
      const Vec &DY = r.values["dy"], &W = r.values["w"];
      Vec want(size_t(numel(xs))), bound(want.size());
      for_each_term(c, oh, ow, [&](size_t xi, size_t wi, size_t yi) {
        want[xi] += DY[yi] * W[wi];
        bound[xi] += std::abs(DY[yi] * W[wi]);
      });
      expect_within(got, want, bound, c.o / c.g * c.kh * c.kw, name + " backward input");
    }
    {  // gradient of the weight: each element sums n*oh*ow terms
      Harness r;
      r.threads = 3;
      Tensor x = r.in("x", xs), dy = r.in("dy", ys);
      ConvAttrs a = at;
      a.grad_shape = ws;
      std::vector<float> got = r.eval(conv2d_backward_weight(x, dy, a));
      const Vec &X = r.values["x"], &DY = r.values["dy"];
      Vec want(size_t(numel(ws))), bound(want.size());
      for_each_term(c, oh, ow, [&](size_t xi, size_t wi, size_t yi) {
        want[wi] += X[xi] * DY[yi];
        bound[wi] += std::abs(X[xi] * DY[yi]);
      });
      expect_within(got, want, bound, c.n * oh * ow, name + " backward weight");
    }
  }
}

}  // namespace
}  // namespace meganeura
