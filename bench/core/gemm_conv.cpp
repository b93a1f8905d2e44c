// f32 GEMM and convolution throughput of the CPU backend: OpenBLAS against oneDNN for the
// GEMMs (both through the backend's pool split, plus oneDNN threading itself over OpenMP),
// and the convolution ops: im2col + GEMM on either library, the backend as it runs now (oneDNN
// primitives where they apply, batch split over the pool), and oneDNN's primitives called
// directly, threaded by OpenMP. Prints one table line per case: medians over the
// repetitions and the ratios. Usage: bench_core_gemm_conv [threads] [max gemm size]
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/onednn_conv.h"
#include "backend/cpu/openmp.h"
#include "backend/cpu/parallel.h"
#include "graph/internal.h"
#include "meganeura/session.h"

using namespace meganeura;
using Clock = std::chrono::steady_clock;

namespace {

// Median wall times of the variants over `reps` rounds after one warm-up round; each round runs
// every variant once, alternating, so that load changes on a shared machine hit all alike.
std::vector<double> medians_s(int reps, const std::vector<std::function<void()>>& fs) {
  std::vector<std::vector<double>> t(fs.size());
  for (int r = -1; r < reps; ++r) {
    for (size_t i = 0; i < fs.size(); ++i) {
      const auto t0 = Clock::now();
      fs[i]();
      if (r >= 0) t[i].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  std::vector<double> m;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    m.push_back(v[v.size() / 2]);
  }
  return m;
}

std::vector<float> randn(int64_t n, uint64_t seed) {
  std::mt19937_64 r(seed);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> v(size_t(n), 0.f);
  for (auto& x : v) x = d(r);
  return v;
}

void bench_gemm(int threads, int64_t max_n) {
  std::printf(
      "| sgemm n=m=k | OpenBLAS (pool) | oneDNN (pool) | oneDNN (own OpenMP threads) | OpenBLAS/oneDNN(pool) |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  for (int64_t n = 128; n <= max_n; n *= 2) {
    std::vector<float> a = randn(n * n, 1), b = randn(n * n, 2), c(size_t(n * n));
    const int reps = n >= 2048 ? 5 : n >= 1024 ? 9 : 21;
    const double flop = 2.0 * double(n) * double(n) * double(n);
    auto ours = [&](cpu::F32Gemm lib) {
      return [&, lib] {
        cpu::set_f32_gemm(lib);
        cpu::gemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
      };
    };
    const std::vector<double> t =
        medians_s(reps, {ours(cpu::F32Gemm::openblas), ours(cpu::F32Gemm::onednn), [&] {
                           omp_set_num_threads(threads);
                           dnnl_sgemm('N', 'N', n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
                           omp_set_num_threads(1);
                         }});
    const double t_blas = t[0], t_dnnl = t[1], t_omp = t[2];
    std::printf("| %lld | %.2f ms (%.0f GFLOP/s) | %.2f ms (%.0f GFLOP/s) | %.2f ms (%.0f GFLOP/s) | %.2f |\n",
                (long long)n, t_blas * 1e3, flop / t_blas * 1e-9, t_dnnl * 1e3, flop / t_dnnl * 1e-9, t_omp * 1e3,
                flop / t_omp * 1e-9, t_blas / t_dnnl);
  }
}

struct Layer {
  const char* name;
  int64_t n, c, h, w, o, k, s, p;
};

// oneDNN's convolution primitives, created once. plain: on NCHW/OIHW memory as the backend's
// tensors are; blocked: oneDNN's preferred layouts, with the reorders from and to NCHW/OIHW
// that the backend would need around each op counted in the time.
struct OnednnConv {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream st{eng};
  std::vector<std::vector<float>> bufs;
  std::vector<std::function<void()>> steps;
  std::string impl;
  int threads = 1;

  OnednnConv(const Layer& l, int64_t oh, int64_t ow, int dir, bool blocked, int threads_) : threads(threads_) {
    using namespace dnnl;
    using tag = memory::format_tag;
    const memory::dims xd{l.n, l.c, l.h, l.w}, wd{l.o, l.c, l.k, l.k}, yd{l.n, l.o, oh, ow};
    const memory::dims stride{l.s, l.s}, pad{l.p, l.p};
    auto md = [&](const memory::dims& d, tag t) {
      return memory::desc(d, memory::data_type::f32, blocked ? tag::any : t);
    };
    convolution_forward::primitive_desc fwd(
        convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, md(xd, tag::nchw),
                                  md(wd, tag::oihw), md(yd, tag::nchw), stride, pad, pad),
        eng);
    // The op's two inputs and its output: (plain dims and tag, the primitive's desc, argument).
    struct Io {
      memory::dims dims;
      tag t;
      memory::desc want;
      int arg;
    };
    std::vector<Io> io;
    primitive prim;
    if (dir == 0) {
      io = {{xd, tag::nchw, fwd.src_desc(), DNNL_ARG_SRC},
            {wd, tag::oihw, fwd.weights_desc(), DNNL_ARG_WEIGHTS},
            {yd, tag::nchw, fwd.dst_desc(), DNNL_ARG_DST}};
      prim = convolution_forward(fwd);
      impl = fwd.impl_info_str();
    } else if (dir == 1) {
      convolution_backward_data::primitive_desc pd(
          convolution_backward_data::desc(algorithm::convolution_direct, md(xd, tag::nchw), md(wd, tag::oihw),
                                          md(yd, tag::nchw), stride, pad, pad),
          eng, fwd);
      io = {{yd, tag::nchw, pd.diff_dst_desc(), DNNL_ARG_DIFF_DST},
            {wd, tag::oihw, pd.weights_desc(), DNNL_ARG_WEIGHTS},
            {xd, tag::nchw, pd.diff_src_desc(), DNNL_ARG_DIFF_SRC}};
      prim = convolution_backward_data(pd);
      impl = pd.impl_info_str();
    } else {
      convolution_backward_weights::primitive_desc pd(
          convolution_backward_weights::desc(algorithm::convolution_direct, md(xd, tag::nchw), md(wd, tag::oihw),
                                             md(yd, tag::nchw), stride, pad, pad),
          eng, fwd);
      io = {{xd, tag::nchw, pd.src_desc(), DNNL_ARG_SRC},
            {yd, tag::nchw, pd.diff_dst_desc(), DNNL_ARG_DIFF_DST},
            {wd, tag::oihw, pd.diff_weights_desc(), DNNL_ARG_DIFF_WEIGHTS}};
      prim = convolution_backward_weights(pd);
      impl = pd.impl_info_str();
    }
    std::unordered_map<int, memory> args;
    std::vector<std::function<void()>> after;
    for (size_t i = 0; i < io.size(); ++i) {
      const memory::desc plain(io[i].dims, memory::data_type::f32, io[i].t);
      bufs.push_back(randn(int64_t(plain.get_size() / sizeof(float)), 7 + i));
      memory user(plain, eng, bufs.back().data());
      if (io[i].want == plain) {
        args[io[i].arg] = user;
        continue;
      }
      memory inner(io[i].want, eng);
      args[io[i].arg] = inner;
      if (i < 2) {
        reorder r(user, inner);
        steps.push_back([this, r, user, inner]() mutable { r.execute(st, user, inner); });
      } else {
        reorder r(inner, user);
        after.push_back([this, r, user, inner]() mutable { r.execute(st, inner, user); });
      }
    }
    steps.push_back([this, prim, args]() mutable { prim.execute(st, args); });
    for (auto& f : after) steps.push_back(f);
  }
  void run() {
    omp_set_num_threads(threads);
    for (auto& f : steps) f();
    st.wait();
    omp_set_num_threads(1);
  }
};

void bench_conv(int threads) {
  const Layer layers[] = {{"3x3 64->64 56x56", 8, 64, 56, 56, 64, 3, 1, 1},
                          {"1x1 256->64 56x56", 8, 256, 56, 56, 64, 1, 1, 0},
                          {"7x7/2 3->64 224x224 (stem)", 8, 3, 224, 224, 64, 7, 2, 3}};
  std::printf(
      "\n| conv (batch 8) | direction | im2col+OpenBLAS (before) | im2col+oneDNN sgemm | backend now | before/now |"
      " oneDNN primitive, NCHW, OpenMP | oneDNN primitive, blocked + reorders, OpenMP |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
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
      OnednnConv plain(l, oh, ow, dir, false, threads), blocked(l, oh, ow, dir, true, threads);
      auto backend = [&](cpu::F32Gemm lib, bool primitives) {
        return [&, lib, primitives] {
          cpu::set_f32_gemm(lib);
          cpu::set_onednn_conv(primitives);
          s.run();
        };
      };
      const std::vector<double> t =
          medians_s(reps, {backend(cpu::F32Gemm::openblas, false), backend(cpu::F32Gemm::onednn, false),
                           backend(cpu::F32Gemm::onednn, true), [&] { plain.run(); }, [&] { blocked.run(); }});
      cpu::set_onednn_conv(true);
      const char* names[] = {"forward", "backward input", "backward weight"};
      std::printf("| %s | %s | %.1f ms | %.1f ms | %.1f ms | %.2f | %.1f ms (%s) | %.1f ms (%s) |\n", l.name,
                  names[dir], t[0] * 1e3, t[1] * 1e3, t[2] * 1e3, t[0] / t[2], t[3] * 1e3, plain.impl.c_str(),
                  t[4] * 1e3, blocked.impl.c_str());
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
