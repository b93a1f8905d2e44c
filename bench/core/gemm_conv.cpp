// f32 GEMM and convolution throughput of the CPU backend: OpenBLAS against oneDNN for the
// GEMMs (both through the backend's pool split, plus oneDNN threading itself over OpenMP),
// and the convolution ops (im2col + GEMM on either library, against oneDNN's own NCHW
// convolution primitive for reference). Prints one table line per case: medians over the
// repetitions and the ratios. Usage: bench_core_gemm_conv [threads] [max gemm size]
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <span>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/parallel.h"
#include "meganeura/session.h"

using namespace meganeura;
using Clock = std::chrono::steady_clock;

namespace {

// Median wall time of `reps` runs after one warm-up.
double median_s(int reps, const std::function<void()>& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<float> randn(int64_t n, uint64_t seed) {
  std::mt19937_64 r(seed);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> v(size_t(n), 0.f);
  for (auto& x : v) x = d(r);
  return v;
}

void bench_gemm(int threads, int64_t max_n) {
  std::printf("| sgemm n=m=k | OpenBLAS (pool) | oneDNN (pool) | oneDNN (own OpenMP threads) | OpenBLAS/oneDNN(pool) |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  for (int64_t n = 128; n <= max_n; n *= 2) {
    std::vector<float> a = randn(n * n, 1), b = randn(n * n, 2), c(size_t(n * n));
    const int reps = n >= 2048 ? 5 : n >= 1024 ? 9 : 21;
    const double flop = 2.0 * double(n) * double(n) * double(n);
    auto ours = [&](cpu::F32Gemm lib) {
      cpu::set_f32_gemm(lib);
      return median_s(reps, [&] { cpu::gemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n); });
    };
    const double t_blas = ours(cpu::F32Gemm::openblas), t_dnnl = ours(cpu::F32Gemm::onednn);
    omp_set_num_threads(threads);
    const double t_omp = median_s(reps, [&] {
      dnnl_sgemm('N', 'N', n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    });
    omp_set_num_threads(1);
    std::printf("| %lld | %.2f ms (%.0f GFLOP/s) | %.2f ms (%.0f GFLOP/s) | %.2f ms (%.0f GFLOP/s) | %.2f |\n",
                (long long)n, t_blas * 1e3, flop / t_blas * 1e-9, t_dnnl * 1e3, flop / t_dnnl * 1e-9, t_omp * 1e3,
                flop / t_omp * 1e-9, t_blas / t_dnnl);
  }
}

struct Layer { const char* name; int64_t n, c, h, w, o, k, s, p; };

// oneDNN's convolution primitive on plain NCHW/OIHW memory, forward only (what the backend
// would get without carrying blocked layouts between ops); primitive created once.
double onednn_conv_forward(const Layer& l, int64_t oh, int64_t ow, int reps, int threads) {
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  using tag = memory::format_tag;
  memory::desc src({l.n, l.c, l.h, l.w}, memory::data_type::f32, tag::nchw);
  memory::desc wei({l.o, l.c, l.k, l.k}, memory::data_type::f32, tag::oihw);
  memory::desc dst({l.n, l.o, oh, ow}, memory::data_type::f32, tag::nchw);
  convolution_forward::desc d(prop_kind::forward_training, algorithm::convolution_direct, src, wei, dst,
                              {l.s, l.s}, {l.p, l.p}, {l.p, l.p});
  convolution_forward::primitive_desc pd(d, eng);
  std::vector<float> x = randn(l.n * l.c * l.h * l.w, 3), w = randn(l.o * l.c * l.k * l.k, 4);
  std::vector<float> y(size_t(l.n * l.o * oh * ow));
  memory xm(src, eng, x.data()), wm(wei, eng, w.data()), ym(dst, eng, y.data());
  convolution_forward conv(pd);
  omp_set_num_threads(threads);
  const double t = median_s(reps, [&] {
    conv.execute(st, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
    st.wait();
  });
  omp_set_num_threads(1);
  std::printf("    (oneDNN picked %s)\n", pd.impl_info_str());
  return t;
}

void bench_conv(int threads) {
  const Layer layers[] = {{"3x3 64->64 56x56", 8, 64, 56, 56, 64, 3, 1, 1},
                          {"1x1 256->64 56x56", 8, 256, 56, 56, 64, 1, 1, 0},
                          {"7x7/2 3->64 224x224 (stem)", 8, 3, 224, 224, 64, 7, 2, 3}};
  std::printf("\n| conv (batch 8) | direction | im2col+OpenBLAS | im2col+oneDNN sgemm | ratio | oneDNN conv primitive (NCHW) |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const Layer& l : layers) {
    const int64_t oh = (l.h + 2 * l.p - l.k) / l.s + 1, ow = (l.w + 2 * l.p - l.k) / l.s + 1;
    const Shape xs{l.n, l.c, l.h, l.w}, ws{l.o, l.c, l.k, l.k}, ys{l.n, l.o, oh, ow};
    ConvAttrs at;
    at.stride[0] = at.stride[1] = l.s;
    at.pad[0] = at.pad[1] = l.p;
    for (int dir = 0; dir < 3; ++dir) {
      Graph g;
      Tensor y;
      const Shape sa = dir == 1 ? ys : xs, sb = dir == 2 ? ys : ws;
      if (dir == 0) {
        y = conv2d(g.input("a", sa), g.input("b", sb), Conv2dOptions{l.s, l.s, l.p, l.p, 1, 1, 1});
      } else if (dir == 1) {
        ConvAttrs a = at;
        a.grad_shape = xs;
        y = conv2d_backward_input(g.input("a", sa), g.input("b", sb), a);
      } else {
        ConvAttrs a = at;
        a.grad_shape = ws;
        y = conv2d_backward_weight(g.input("a", sa), g.input("b", sb), a);
      }
      g.output("y", y);
      SessionOptions so;
      so.threads = threads;
      Session s(so);
      s.add(g);
      const std::vector<float> va = randn(numel(sa), 5), vb = randn(numel(sb), 6);
      s.set("a", std::span<const float>(va));
      s.set("b", std::span<const float>(vb));
      const int reps = 7;
      cpu::set_f32_gemm(cpu::F32Gemm::openblas);
      const double t_blas = median_s(reps, [&] { s.run(); });
      cpu::set_f32_gemm(cpu::F32Gemm::onednn);
      const double t_dnnl = median_s(reps, [&] { s.run(); });
      const char* names[] = {"forward", "backward input", "backward weight"};
      char prim[64] = "-";
      if (dir == 0) std::snprintf(prim, sizeof prim, "%.1f ms", onednn_conv_forward(l, oh, ow, reps, threads) * 1e3);
      std::printf("| %s | %s | %.1f ms | %.1f ms | %.2f | %s |\n", l.name, names[dir], t_blas * 1e3, t_dnnl * 1e3,
                  t_blas / t_dnnl, prim);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  const int64_t max_n = argc > 2 ? std::atoll(argv[2]) : 2048;
  cpu::set_threads(threads);
  std::printf("threads: %d\n\n", cpu::thread_count());
  bench_gemm(cpu::thread_count(), max_n);
  bench_conv(cpu::thread_count());
  cpu::set_f32_gemm(cpu::F32Gemm::onednn);
  return 0;
}
