// Forward semantics of the ops against naive f64 loops written independently of the kernels
// (the gradient checks prove backward consistent with forward; these prove forward right).
// Tolerance: f32 results within 2e-5 * (1 + |ref|) of f64 (reductions here are <= 200 long).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <numbers>
#include <random>

#include "forward_harness.h"
#include "graph/internal.h"
#include "meganeura/passes.h"
#include "meganeura/session.h"

namespace meganeura {
namespace {

using forward_test::expect_close;
using forward_test::randn;
using forward_test::Vec;

struct Harness : forward_test::Inputs {
  Harness() : Inputs(31, 5) {}
  int outputs = 0;
  // Runs the graph so far with `y` as a new output (earlier outputs run again too: harmless).
  Vec eval(Tensor y, std::map<std::string, std::vector<int32_t>> id_values = {}) {
    const std::string out = "y" + std::to_string(outputs++);
    g.output(out, y);
    Session s;
    s.add(g);
    feed(s);
    for (auto& [k, v] : id_values) s.set(k, std::span<const int32_t>(v));
    s.run();
    auto f = s.get_f64(out);
    return Vec(f.begin(), f.end());
  }
};

TEST(Forward, MatmulTransposesAndBatches) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Harness r;
      const int64_t B = 2, M = 3, K = 4, N = 5;
      Tensor a = r.in("a", ta ? Shape{B, K, M} : Shape{B, M, K});
      Tensor b = r.in("b", tb ? Shape{N, K} : Shape{K, N});
      Vec y = r.eval(matmul(a, b, ta, tb));
      const Vec &A = r.values["a"], &Bv = r.values["b"];
      Vec want(size_t(B * M * N));
      for (int64_t bb = 0; bb < B; ++bb)
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k) {
              double av = ta ? A[size_t(bb * K * M + k * M + i)] : A[size_t(bb * M * K + i * K + k)];
              double bv = tb ? Bv[size_t(j * K + k)] : Bv[size_t(k * N + j)];
              s += av * bv;
            }
            want[size_t((bb * M + i) * N + j)] = s;
          }
      expect_close(y, want, "matmul");
    }
  }
}

TEST(Forward, Conv2dAllOptions) {
  struct C {
    int64_t n, c, h, w, o, k, s, p, d, g;
  };
  for (C c : {C{2, 3, 7, 6, 4, 3, 1, 1, 1, 1}, C{1, 4, 9, 8, 6, 3, 2, 1, 2, 2}, C{1, 3, 5, 5, 3, 3, 1, 0, 1, 3},
              C{1, 2, 4, 4, 3, 1, 1, 0, 1, 1}}) {
    Harness r;
    Tensor x = r.in("x", {c.n, c.c, c.h, c.w});
    Tensor w = r.in("w", {c.o, c.c / c.g, c.k, c.k});
    Vec y = r.eval(conv2d(x, w, Conv2dOptions{c.s, c.s, c.p, c.p, c.d, c.d, c.g}));
    const Vec &X = r.values["x"], &W = r.values["w"];
    const int64_t oh = (c.h + 2 * c.p - c.d * (c.k - 1) - 1) / c.s + 1,
                  ow = (c.w + 2 * c.p - c.d * (c.k - 1) - 1) / c.s + 1;
    const int64_t cg = c.c / c.g, og = c.o / c.g;
    Vec want;
    for (int64_t n = 0; n < c.n; ++n)
      for (int64_t o = 0; o < c.o; ++o)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j) {
            double s = 0;
            const int64_t grp = o / og;
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t ki = 0; ki < c.k; ++ki)
                for (int64_t kj = 0; kj < c.k; ++kj) {
                  int64_t y0 = i * c.s - c.p + ki * c.d, x0 = j * c.s - c.p + kj * c.d;
                  if (y0 < 0 || y0 >= c.h || x0 < 0 || x0 >= c.w) continue;
                  s += X[size_t(((n * c.c + grp * cg + ci) * c.h + y0) * c.w + x0)] *
                       W[size_t(((o * cg + ci) * c.k + ki) * c.k + kj)];
                }
            want.push_back(s);
          }
    expect_close(y, want, "conv2d");
  }
}

TEST(Forward, PoolingAndUpsampling) {
  Harness r;
  Tensor x = r.in("x", {1, 2, 5, 5});
  Vec mp = r.eval(max_pool2d(x, 3, 2, 1));
  Vec ap = r.eval(avg_pool2d(x, 3, 2, 1));
  Vec up = r.eval(upsample_nearest2x(x));
  const Vec& X = r.values["x"];
  Vec want_max, want_avg, want_up;
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        double m = -1e300, s = 0;
        for (int64_t a = 2 * i - 1; a < 2 * i + 2; ++a)
          for (int64_t b = 2 * j - 1; b < 2 * j + 2; ++b)
            if (a >= 0 && a < 5 && b >= 0 && b < 5) {
              m = std::max(m, X[size_t((c * 5 + a) * 5 + b)]);
              s += X[size_t((c * 5 + a) * 5 + b)];
            }
        want_max.push_back(m);
        want_avg.push_back(s / 9);  // padding counts, as in PyTorch's default
      }
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 10; ++i)
      for (int64_t j = 0; j < 10; ++j) want_up.push_back(X[size_t((c * 5 + i / 2) * 5 + j / 2)]);
  expect_close(mp, want_max, "max_pool2d");
  expect_close(ap, want_avg, "avg_pool2d");
  expect_close(up, want_up, "upsample");
}

TEST(Forward, NormsAndActivations) {
  Harness r;
  Tensor x = r.in("x", {2, 4, 3});
  Tensor gm = r.in("g", {3}), bt = r.in("b", {3}), gc = r.in("gc", {4}), bc = r.in("bc", {4});
  const Vec &X = r.values["x"], &Gm = r.values["g"], &Bt = r.values["b"], &Gc = r.values["gc"], &Bc = r.values["bc"];
  Vec ln, rms, gn(24), ge, gt;
  for (int64_t row = 0; row < 8; ++row) {
    double mu = 0, var = 0, ms = 0;
    for (int64_t k = 0; k < 3; ++k) mu += X[size_t(row * 3 + k)] / 3;
    for (int64_t k = 0; k < 3; ++k) {
      var += std::pow(X[size_t(row * 3 + k)] - mu, 2) / 3;
      ms += std::pow(X[size_t(row * 3 + k)], 2) / 3;
    }
    for (int64_t k = 0; k < 3; ++k) {
      ln.push_back((X[size_t(row * 3 + k)] - mu) / std::sqrt(var + 1e-5) * Gm[size_t(k)] + Bt[size_t(k)]);
      rms.push_back(X[size_t(row * 3 + k)] / std::sqrt(ms + 1e-5) * Gm[size_t(k)]);
    }
  }
  for (int64_t n = 0; n < 2; ++n)  // group norm, 2 groups of 2 channels over [N, C=4, L=3]
    for (int64_t grp = 0; grp < 2; ++grp) {
      double mu = 0, var = 0;
      for (int64_t k = 0; k < 6; ++k) mu += X[size_t(n * 12 + grp * 6 + k)] / 6;
      for (int64_t k = 0; k < 6; ++k) var += std::pow(X[size_t(n * 12 + grp * 6 + k)] - mu, 2) / 6;
      for (int64_t k = 0; k < 6; ++k) {
        int64_t ch = grp * 2 + k / 3;
        gn[size_t(n * 12 + grp * 6 + k)] =
            (X[size_t(n * 12 + grp * 6 + k)] - mu) / std::sqrt(var + 1e-5) * Gc[size_t(ch)] + Bc[size_t(ch)];
      }
    }
  for (double v : X) {
    ge.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    gt.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
  }
  expect_close(r.eval(layer_norm(x, gm, bt)), ln, "layer_norm");
  expect_close(r.eval(rms_norm(x, gm)), rms, "rms_norm");
  expect_close(r.eval(group_norm(x, 2, gc, bc)), gn, "group_norm");
  expect_close(r.eval(gelu(x)), ge, "gelu_erf");
  expect_close(r.eval(gelu(x, true)), gt, "gelu_tanh");
}

// softplus on both tails and between, in f32, against log(1 + e^x) in long double: relative
// error within a few f32 ulps, also where the result is tiny (x = -60: 8.7e-27), which an
// absolute tolerance would not see.
TEST(Forward, Softplus) {
  Harness r;
  Tensor x = r.in("x", {7});
  r.values["x"] = {-60, -16, -3.5, 0, 0.7, 19.5, 45};
  const Vec got = r.eval(softplus(x));
  for (size_t i = 0; i < got.size(); ++i) {
    const long double v = r.values["x"][i];
    const double want = double(std::log1p(std::exp(v)));
    EXPECT_NEAR(got[i] / want, 1.0, 5e-7) << "softplus(" << double(v) << ") = " << got[i] << ", want " << want;
  }
}

// hardswish on each piece and at both kinks, in f32, against x * min(max(x + 3, 0), 6) / 6 in
// long double: within an f32 rounding or two of the result.
TEST(Forward, Hardswish) {
  Harness r;
  Tensor x = r.in("x", {9});
  r.values["x"] = {-7, -3, -2.9f, -1.5, 0, 0.4f, 2.9f, 3, 11};
  const Vec got = r.eval(hardswish(x));
  for (size_t i = 0; i < got.size(); ++i) {
    const long double v = r.values["x"][i];
    const double want = double(v * std::min(std::max(v + 3, 0.0L), 6.0L) / 6);
    EXPECT_NEAR(got[i], want, 3e-7 * (1 + std::abs(want))) << "hardswish(" << double(v) << ")";
  }
}

// Naive attention: per query head, keys/values of head h / (Hq/Hkv); causal aligned bottom-right.
Vec naive_attention(const Vec& q, const Vec& k, const Vec& v, int64_t B, int64_t Hq, int64_t Hk, int64_t Sq, int64_t Sk,
                    int64_t D, bool causal) {
  Vec out(size_t(B * Hq * Sq * D), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t kh = h / (Hq / Hk);
        Vec s(static_cast<size_t>(Sk));
        double m = -1e300;
        for (int64_t j = 0; j < Sk; ++j) {
          double d = 0;
          for (int64_t t = 0; t < D; ++t)
            d += q[size_t(((b * Hq + h) * Sq + i) * D + t)] * k[size_t(((b * Hk + kh) * Sk + j) * D + t)];
          s[size_t(j)] = (causal && j > i + (Sk - Sq)) ? -1e300 : d / std::sqrt(double(D));
          m = std::max(m, s[size_t(j)]);
        }
        double z = 0;
        for (auto& x : s) z += (x = std::exp(x - m));
        for (int64_t j = 0; j < Sk; ++j)
          for (int64_t t = 0; t < D; ++t)
            out[size_t(((b * Hq + h) * Sq + i) * D + t)] +=
                s[size_t(j)] / z * v[size_t(((b * Hk + kh) * Sk + j) * D + t)];
      }
  return out;
}

TEST(Forward, AttentionCausalGroupedAndCross) {
  struct A {
    int64_t b, hq, hk, sq, sk, d;
    bool causal;
  };
  // The last two are long enough for the tiled attention op (two query tiles, Sq != Sk).
  for (A a : {A{1, 4, 2, 5, 5, 8, true}, A{2, 3, 3, 4, 6, 4, false}, A{1, 2, 1, 3, 7, 4, true},
              A{1, 4, 2, 260, 270, 8, true}, A{2, 2, 2, 300, 250, 4, false}}) {
    Harness r;
    Tensor q = r.in("q", {a.b, a.hq, a.sq, a.d}), k = r.in("k", {a.b, a.hk, a.sk, a.d}),
           v = r.in("v", {a.b, a.hk, a.sk, a.d});
    Vec y = r.eval(attention(q, k, v, a.causal));
    expect_close(
        y, naive_attention(r.values["q"], r.values["k"], r.values["v"], a.b, a.hq, a.hk, a.sq, a.sk, a.d, a.causal),
        "attention");
  }
}

TEST(Forward, RotaryHalfSplit) {
  Harness r;
  Tensor x = r.in("x", {2, 3, 4, 6});
  Vec y = r.eval(rope(x, 500.0));
  const Vec& X = r.values["x"];
  Vec want(X.size());
  for (int64_t row = 0; row < 24; ++row) {
    const int64_t pos = row % 4;
    for (int64_t i = 0; i < 3; ++i) {
      const double th = double(pos) / std::pow(500.0, 2.0 * double(i) / 6.0);
      const double a = X[size_t(row * 6 + i)], b = X[size_t(row * 6 + i + 3)];
      want[size_t(row * 6 + i)] = a * std::cos(th) - b * std::sin(th);
      want[size_t(row * 6 + i + 3)] = b * std::cos(th) + a * std::sin(th);
    }
  }
  expect_close(y, want, "rope");
}

// Llama 3 and linear frequency scaling against transformers' three-branch formula
// (_compute_llama3_parameters), written out here: keep where the wavelength is under
// L / high_freq_factor, divide by factor where over L / low_freq_factor, else blend.
TEST(Forward, RotaryFrequencyScaling) {
  const double factor = 8, low = 1, high = 4, L = 64;
  for (bool llama3 : {true, false}) {
    Harness r;
    Tensor x = r.in("x", {1, 2, 6, 16});
    RopeAttrs attrs;
    attrs.factor = factor;
    if (llama3) {
      attrs.low_freq_factor = low;
      attrs.high_freq_factor = high;
      attrs.original_max_position = int64_t(L);
    }
    Vec y = r.eval(rope_scaled(x, attrs));
    const Vec& X = r.values["x"];
    Vec want(X.size());
    for (int64_t row = 0; row < 12; ++row) {
      const int64_t pos = row % 6;
      for (int64_t i = 0; i < 8; ++i) {
        const double f = std::pow(10000.0, -2.0 * double(i) / 16.0), wavelen = 2 * std::numbers::pi / f;
        double g = f / factor;
        if (llama3 && wavelen < L / high) {
          g = f;
        } else if (llama3 && wavelen <= L / low) {
          const double smooth = (L / wavelen - low) / (high - low);
          g = (1 - smooth) * f / factor + smooth * f;
        }
        const double th = double(pos) * g, a = X[size_t(row * 16 + i)], b = X[size_t(row * 16 + i + 8)];
        want[size_t(row * 16 + i)] = a * std::cos(th) - b * std::sin(th);
        want[size_t(row * 16 + i + 8)] = b * std::cos(th) + a * std::sin(th);
      }
    }
    expect_close(y, want, llama3 ? "rope/llama3" : "rope/linear");
  }
}

TEST(Forward, CrossEntropyIgnoreIndexAndEmbedding) {
  Harness r;
  Tensor logits = r.in("l", {4, 5});
  Tensor t = r.g.input("t", {4}, DType::i32);
  std::vector<int32_t> targets = {1, -100, 4, 0};
  Vec y = r.eval(cross_entropy(logits, t), {{"t", targets}});
  const Vec& L = r.values["l"];
  double loss = 0;
  for (int64_t i = 0; i < 4; ++i) {
    if (targets[size_t(i)] < 0) continue;
    double z = 0;
    for (int64_t c = 0; c < 5; ++c) z += std::exp(L[size_t(i * 5 + c)]);
    loss += std::log(z) - L[size_t(i * 5 + targets[size_t(i)])];
  }
  expect_close(y, {loss / 3}, "cross_entropy");

  Harness e;
  Tensor table = e.in("table", {6, 3});
  Tensor ids = e.g.input("ids", {2, 2}, DType::i32);
  std::vector<int32_t> idv = {5, 0, 5, 2};
  Vec emb = e.eval(embedding(table, ids), {{"ids", idv}});
  Vec want;
  for (int32_t id : idv)
    for (int64_t k = 0; k < 3; ++k) want.push_back(e.values["table"][size_t(id * 3 + k)]);
  expect_close(emb, want, "embedding");
}

TEST(Forward, MovementOps) {
  Harness r;
  Tensor x = r.in("x", {2, 3, 4});
  const Vec& X = r.values["x"];
  auto at = [&](int64_t a, int64_t b, int64_t c) { return X[size_t((a * 3 + b) * 4 + c)]; };
  Vec perm, sl, pd, cat;
  for (int64_t c = 0; c < 4; ++c)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 3; ++b) perm.push_back(at(a, b, c));
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 1; b < 3; ++b)
      for (int64_t c = 1; c < 3; ++c) sl.push_back(at(a, b, c));
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 6; ++c) pd.push_back(c >= 1 && c < 5 ? at(a, b, c - 1) : 0.0);
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 6; ++b)
      for (int64_t c = 0; c < 4; ++c) cat.push_back(at(a, b % 3, c) * (b < 3 ? 1 : 2));
  expect_close(r.eval(permute(x, {2, 0, 1})), perm, "permute");
  expect_close(r.eval(slice(x, {0, 1, 1}, {2, 3, 3})), sl, "slice");
  expect_close(r.eval(pad(x, {0, 0, 1}, {0, 0, 1})), pd, "pad");
  expect_close(r.eval(concat({x, x * 2.0}, 1)), cat, "concat");
}

// Reductions over tensors large enough to be split over the pool, for every pattern of
// reduced and kept axes the kernel distinguishes: contiguous trailing axes (rows), leading
// axes (columns, more than one slice of them), and reduced axes with kept ones between them
// (batch-norm statistics over N, H and W). Sums of up to 3,567 standard-normal values: |ref|
// stays below ~250, well inside the tolerance (accumulation is in double either way).
TEST(Forward, ReductionsOverAnyAxesAtScale) {
  struct C {
    Shape shape;
    std::vector<int64_t> axes;
  };
  std::vector<C> cases;
  for (std::vector<int64_t> axes : {std::vector<int64_t>{3}, {2, 3}, {0}, {0, 1}, {0, 2, 3}, {0, 2}, {1, 3}, {1}}) {
    cases.push_back({{3, 37, 41, 29}, axes});
  }
  cases.push_back({{3, 5, 9, 301}, {0, 2}});  // the largest kept dimension is the last: split within runs
  for (const C& k : cases) {
    const Shape& shape = k.shape;
    const std::vector<int64_t>& axes = k.axes;
    const int64_t n = numel(shape);
    Harness r;
    Tensor x = r.in("x", shape);
    const Vec& X = r.values["x"];
    // The kept axes, in order, index the output.
    auto out_index = [&](const int64_t* idx) {
      int64_t o = 0;
      for (int64_t d = 0; d < 4; ++d) {
        if (std::find(axes.begin(), axes.end(), d) == axes.end()) o = o * shape[size_t(d)] + idx[d];
      }
      return o;
    };
    int64_t outputs = 1, count = 1;
    for (int64_t d = 0; d < 4; ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end())
        outputs *= shape[size_t(d)];
      else
        count *= shape[size_t(d)];
    }
    Vec want_sum(size_t(outputs), 0.0), want_max(size_t(outputs), -INFINITY);
    int64_t idx[4];
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = i;
      for (int64_t d = 3; d >= 0; --d) {
        idx[d] = rem % shape[size_t(d)];
        rem /= shape[size_t(d)];
      }
      const size_t o = size_t(out_index(idx));
      want_sum[o] += X[size_t(i)];
      want_max[o] = std::max(want_max[o], X[size_t(i)]);
    }
    Vec want_mean = want_sum;
    for (double& v : want_mean) v /= double(count);
    std::string what = "axes";
    for (int64_t a : axes) what += " " + std::to_string(a);
    SCOPED_TRACE(what);
    expect_close(r.eval(sum(x, axes)), want_sum, "sum");
    expect_close(r.eval(mean(x, axes)), want_mean, "mean");
    expect_close(r.eval(max(x, axes)), want_max, "max");
  }
}

// The same reductions fed by elementwise work, relu(x * s + b) * z with s, b per channel and z
// broadcast over the last axis (so a reduced run crosses the program's rows): the CPU's passes
// make each a fused_reduce, which evaluates the program a block at a time and reduces as it
// goes; a backend without that walk (strided_reductions off) keeps the non-contiguous ones
// primitive.
TEST(Forward, FusedReductionsOverAnyAxesAtScale) {
  struct C {
    Shape shape;
    std::vector<int64_t> axes;
  };
  std::vector<C> cases;
  for (std::vector<int64_t> axes : {std::vector<int64_t>{3}, {2, 3}, {0}, {0, 2, 3}, {0, 2}, {1, 3}, {0, 1, 3}}) {
    cases.push_back({{3, 37, 41, 29}, axes});
  }
  cases.push_back({{3, 5, 9, 301}, {0, 2}});  // the largest kept dimension is the last: split within runs
  for (const C& k : cases) {
    const Shape& sh = k.shape;
    const std::vector<int64_t>& axes = k.axes;
    std::string what = "axes";
    for (int64_t a : axes) what += " " + std::to_string(a);
    SCOPED_TRACE(what);
    Harness r;
    Tensor x = r.in("x", sh), s = r.in("s", {1, sh[1], 1, 1}), b = r.in("b", {1, sh[1], 1, 1});
    Tensor z = r.in("z", {sh[0], sh[1], sh[2], 1});
    const Vec &X = r.values["x"], &S = r.values["s"], &B = r.values["b"], &Z = r.values["z"];
    int64_t outputs = 1, count = 1;
    for (int64_t d = 0; d < 4; ++d) {
      (std::find(axes.begin(), axes.end(), d) == axes.end() ? outputs : count) *= sh[size_t(d)];
    }
    Vec want_sum(size_t(outputs), 0.0), want_max(size_t(outputs), -INFINITY);
    for (int64_t i0 = 0; i0 < sh[0]; ++i0)
      for (int64_t i1 = 0; i1 < sh[1]; ++i1)
        for (int64_t i2 = 0; i2 < sh[2]; ++i2)
          for (int64_t i3 = 0; i3 < sh[3]; ++i3) {
            const int64_t idx[4] = {i0, i1, i2, i3};
            int64_t o = 0;
            for (int64_t d = 0; d < 4; ++d) {
              if (std::find(axes.begin(), axes.end(), d) == axes.end()) o = o * sh[size_t(d)] + idx[d];
            }
            const double xs = X[size_t(((i0 * sh[1] + i1) * sh[2] + i2) * sh[3] + i3)] * S[size_t(i1)] + B[size_t(i1)];
            const double v = std::max(xs, 0.0) * Z[size_t((i0 * sh[1] + i1) * sh[2] + i2)];
            want_sum[size_t(o)] += v;
            want_max[size_t(o)] = std::max(want_max[size_t(o)], v);
          }
    Vec want_mean = want_sum;
    for (double& v : want_mean) v /= double(count);
    Tensor v = relu(x * s + b) * z;
    Tensor ys = sum(v, axes), ym = mean(v, axes), yx = max(v, axes);
    expect_close(r.eval(ys), want_sum, "sum");
    expect_close(r.eval(ym), want_mean, "mean");
    expect_close(r.eval(yx), want_max, "max");
    // the path taken: three fused reductions, or with strided_reductions off none for the
    // non-contiguous axes
    auto fused_reductions = [&](const PassOptions& o) {
      size_t n = 0;
      const Graph opt = optimize(r.g, o);
      for (NodeId id = 0; id < opt.size(); ++id) n += opt.node(id).op == Op::fused_reduce;
      return n;
    };
    bool contiguous = true;
    for (size_t a = 1; a < axes.size(); ++a) contiguous &= axes[a] == axes[a - 1] + 1;
    PassOptions primitive;
    primitive.strided_reductions = false;
    EXPECT_EQ(fused_reductions({}), 3u);
    EXPECT_EQ(fused_reductions(primitive), contiguous ? 3u : 0u);
  }
}

// The data gradient of a 1x1 convolution, dx[n][c][p] = sum_o w[o][c] * dy[n][o][p], on each
// path the CPU backend has for it: a GEMM per image split over the pool (few images), whole
// images per pool thread (a batch as large as the pool), and the convolution primitive
// (1,024 input channels or more, where the build has oneDNN); strided, it goes through columns.
TEST(Forward, PointwiseConvolutionDataGradientOnEveryPath) {
  struct C {
    int64_t n, c, o, h, s;
  };
  for (C c : {C{1, 48, 40, 9, 1}, C{4, 64, 32, 10, 1}, C{4, 1024, 16, 3, 1}, C{4, 1024, 16, 5, 2}}) {
    Harness r;
    const int64_t oh = (c.h - 1) / c.s + 1;
    Tensor dy = r.in("dy", {c.n, c.o, oh, oh});
    Tensor w = r.in("w", {c.o, c.c, 1, 1});
    ConvAttrs a;
    a.stride[0] = a.stride[1] = c.s;
    a.grad_shape = {c.n, c.c, c.h, c.h};
    Vec got = r.eval(conv2d_backward_input(dy, w, a));
    const Vec &DY = r.values["dy"], &W = r.values["w"];
    Vec want(size_t(c.n * c.c * c.h * c.h), 0.0);
    for (int64_t n = 0; n < c.n; ++n)
      for (int64_t ci = 0; ci < c.c; ++ci)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < oh; ++j) {
            double s = 0;
            for (int64_t o = 0; o < c.o; ++o)
              s += W[size_t(o * c.c + ci)] * DY[size_t(((n * c.o + o) * oh + i) * oh + j)];
            want[size_t(((n * c.c + ci) * c.h + i * c.s) * c.h + j * c.s)] = s;
          }
    SCOPED_TRACE("batch " + std::to_string(c.n) + ", " + std::to_string(c.c) + " channels, stride " +
                 std::to_string(c.s));
    expect_close(got, want, "conv2d_backward_input");
  }
}

TEST(Forward, BuilderErrorsNameOpAndShapes) {
  Graph g;
  Tensor a = g.input("a", {2, 3}), b = g.input("b", {4, 5});
  try {
    matmul(a, b);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "[matmul] inner dimensions differ: (2,3) x (4,5)");
  }
  EXPECT_THROW(add(a, b), std::invalid_argument);
  EXPECT_THROW(conv2d(g.input("x", {1, 3, 4, 4}), g.input("w", {2, 2, 3, 3})), std::invalid_argument);
  EXPECT_THROW(reshape(a, {4, 2}), std::invalid_argument);
  EXPECT_THROW(g.input("a", {1}), std::invalid_argument);  // duplicate name
}

}  // namespace
}  // namespace meganeura

namespace meganeura {
namespace {

// Storage casts against known IEEE values (nearest-even rounding), checked through the bits.
TEST(Forward, HalfAndBfloatCasts) {
  Graph g;
  Tensor x = g.input("x", {6});
  g.output("h", cast(cast(x, DType::f16), DType::f32));
  g.output("b", cast(cast(x, DType::bf16), DType::f32));
  g.output("i", cast(cast(x, DType::i32), DType::f32));
  Session s;
  s.add(g);
  std::vector<float> in = {1.0f, 0.1f, 65504.0f, 1e5f, -2.5f, 3.0e-6f};
  s.set("x", std::span<const float>(in));
  s.run();
  auto h = s.get("h"), b = s.get("b"), i = s.get("i");
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], 0.0999755859375f);  // 0x2e66
  EXPECT_EQ(h[2], 65504.0f);          // largest finite half
  EXPECT_TRUE(std::isinf(h[3]));
  EXPECT_EQ(h[4], -2.5f);
  EXPECT_EQ(h[5], 2.98023223876953125e-06f);  // subnormal half 50 * 2^-24
  EXPECT_EQ(b[1], 0.10009765625f);            // 0x3dcd
  EXPECT_EQ(b[3], 99840.0f);                  // 0x47c3
  EXPECT_EQ(i[4], -2.0f);                     // truncation toward zero
}

TEST(Graph, DumpAndJsonDescribeEveryNode) {
  Graph g;
  Tensor x = g.input("x", {2, 3});
  Tensor w = g.parameter("w", {3, 4}, Init{Init::normal, 0.1});
  g.output("y", relu(matmul(x, w)));
  const std::string d = g.dump();
  EXPECT_NE(d.find("%2 = matmul(%0, %1)"), std::string::npos) << d;
  EXPECT_NE(d.find("relu(%2)"), std::string::npos) << d;
  EXPECT_NE(d.find(": f32(2,4)"), std::string::npos) << d;
  EXPECT_NE(d.find("output y = %3"), std::string::npos) << d;
  auto j = nlohmann::json::parse(g.to_json());
  EXPECT_EQ(j["nodes"].size(), 4u);
  EXPECT_EQ(j["nodes"][2]["op"], "matmul");
  EXPECT_EQ(j["nodes"][2]["shape"], nlohmann::json({2, 4}));
  Program p = plan(g);
  auto pj = nlohmann::json::parse(p.to_json());
  EXPECT_EQ(pj["dispatches"].size(), 2u);
  EXPECT_EQ(pj["dispatches"][0]["flops"], 2.0 * 2 * 4 * 3);
}

}  // namespace
}  // namespace meganeura
