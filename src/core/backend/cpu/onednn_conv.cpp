#include "backend/cpu/onednn_conv.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>

#include "backend/cpu/openmp.h"
#include "backend/cpu/parallel.h"

namespace meganeura::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// One part's primitive with oneDNN's preferred (blocked) layouts: reorders from the backend's
// NCHW/OIHW tensors before it and back after it, all memories and the scratchpad owned here so
// that runs after the first allocate nothing.
struct Entry {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream st{eng};
  dnnl::primitive prim;
  memory user[3];   // in0, in1, out in plain layouts (handles set per run)
  memory inner[3];  // the primitive's layouts (== user where they agree)
  std::unique_ptr<dnnl::reorder> to_inner[2], to_user;
  memory scratch;
  int args[3] = {0, 0, 0};
  std::vector<float> partial;  // backward weight: this part's sum, before the total
};

using Key = std::tuple<int, int64_t, Shape, Shape, Shape, int64_t, int64_t, int64_t, int64_t>;

std::unique_ptr<Entry> make_entry(Op op, const Shape& xs, const Shape& ws, const Shape& ys, const ConvAttrs& a) {
  auto e = std::make_unique<Entry>();
  const memory::dims xd(xs.begin(), xs.end()), wd(ws.begin(), ws.end()), yd(ys.begin(), ys.end());
  const memory::dims stride{a.stride[0], a.stride[1]}, pad{a.pad[0], a.pad[1]};
  auto any = [](const memory::dims& d) { return memory::desc(d, memory::data_type::f32, Tag::any); };
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  using namespace dnnl;
  convolution_forward::primitive_desc fwd(
      convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, any(xd), any(wd), any(yd),
                                stride, pad, pad),
      attr, e->eng);
  memory::dims dims[3];
  Tag tags[3];
  memory::desc want[3], scratch;
  if (op == Op::conv2d) {
    dims[0] = xd, dims[1] = wd, dims[2] = yd;
    tags[0] = Tag::nchw, tags[1] = Tag::oihw, tags[2] = Tag::nchw;
    want[0] = fwd.src_desc(), want[1] = fwd.weights_desc(), want[2] = fwd.dst_desc();
    e->args[0] = DNNL_ARG_SRC, e->args[1] = DNNL_ARG_WEIGHTS, e->args[2] = DNNL_ARG_DST;
    e->prim = convolution_forward(fwd);
    scratch = fwd.scratchpad_desc();
  } else if (op == Op::conv2d_backward_input) {
    convolution_backward_data::primitive_desc pd(
        convolution_backward_data::desc(algorithm::convolution_direct, any(xd), any(wd), any(yd), stride, pad, pad),
        attr, e->eng, fwd);
    dims[0] = yd, dims[1] = wd, dims[2] = xd;
    tags[0] = Tag::nchw, tags[1] = Tag::oihw, tags[2] = Tag::nchw;
    want[0] = pd.diff_dst_desc(), want[1] = pd.weights_desc(), want[2] = pd.diff_src_desc();
    e->args[0] = DNNL_ARG_DIFF_DST, e->args[1] = DNNL_ARG_WEIGHTS, e->args[2] = DNNL_ARG_DIFF_SRC;
    e->prim = convolution_backward_data(pd);
    scratch = pd.scratchpad_desc();
  } else {
    convolution_backward_weights::primitive_desc pd(
        convolution_backward_weights::desc(algorithm::convolution_direct, any(xd), any(wd), any(yd), stride, pad, pad),
        attr, e->eng, fwd);
    dims[0] = xd, dims[1] = yd, dims[2] = wd;
    tags[0] = Tag::nchw, tags[1] = Tag::nchw, tags[2] = Tag::oihw;
    want[0] = pd.src_desc(), want[1] = pd.diff_dst_desc(), want[2] = pd.diff_weights_desc();
    e->args[0] = DNNL_ARG_SRC, e->args[1] = DNNL_ARG_DIFF_DST, e->args[2] = DNNL_ARG_DIFF_WEIGHTS;
    e->prim = convolution_backward_weights(pd);
    scratch = pd.scratchpad_desc();
  }
  for (int i = 0; i < 3; ++i) {
    const memory::desc plain(dims[i], memory::data_type::f32, tags[i]);
    e->user[i] = memory(plain, e->eng, DNNL_MEMORY_NONE);
    if (want[i] == plain) {
      e->inner[i] = e->user[i];
      continue;
    }
    e->inner[i] = memory(want[i], e->eng);
    if (i < 2)
      e->to_inner[i] = std::make_unique<reorder>(e->user[i], e->inner[i]);
    else
      e->to_user = std::make_unique<reorder>(e->inner[i], e->user[i]);
  }
  e->scratch = memory(scratch, e->eng);
  return e;
}

void run_entry(Entry& e, const float* in0, const float* in1, float* out) {
  e.user[0].set_data_handle(const_cast<float*>(in0));
  e.user[1].set_data_handle(const_cast<float*>(in1));
  e.user[2].set_data_handle(out);
  for (int i = 0; i < 2; ++i) {
    if (e.to_inner[i]) e.to_inner[i]->execute(e.st, e.user[i], e.inner[i]);
  }
  e.prim.execute(
      e.st,
      {{e.args[0], e.inner[0]}, {e.args[1], e.inner[1]}, {e.args[2], e.inner[2]}, {DNNL_ARG_SCRATCHPAD, e.scratch}});
  if (e.to_user) e.to_user->execute(e.st, e.inner[2], e.user[2]);
  e.st.wait();
}

// Primitives are per thread: each part runs on its own pool thread with its own stream,
// memories and scratchpad, so parts never share mutable state.
Entry& entry(Op op, const Shape& xs, const Shape& ws, const Shape& ys, const ConvAttrs& a) {
  thread_local std::map<Key, std::unique_ptr<Entry>> cache;
  Key k{int(op), xs[0], xs, ws, ys, a.stride[0], a.stride[1], a.pad[0], a.pad[1]};
  auto it = cache.find(k);
  if (it == cache.end()) it = cache.emplace(k, make_entry(op, xs, ws, ys, a)).first;
  return *it->second;
}

std::atomic<bool> g_enabled{true};

}  // namespace

void set_onednn_conv(bool on) { g_enabled = on; }

bool onednn_conv_applies(Op op, const Shape& x, const Shape& w, const ConvAttrs& a) {
  // 1x1 kernels read the input directly as a GEMM operand and measured as fast or faster,
  // except the data gradient into 1024 or more channels (ResNet-50's last two stages: a GEMM
  // transposing a tall weight, measured 1.5-2x slower than the primitive). The data gradient
  // of a few-channel input (an RGB stem) gets oneDNN's GEMM-based fallback with reorders
  // around it, measured slower than im2col + GEMM.
  if (!g_enabled || x.size() != 4 || w.size() != 4) return false;
  if (op == Op::conv2d_backward_input && x[1] < 8) return false;
  const bool deep_data_gradient = op == Op::conv2d_backward_input && x[1] >= 1024;
  return a.groups == 1 && a.dilation[0] == 1 && a.dilation[1] == 1 && (w[2] > 1 || w[3] > 1 || deep_data_gradient);
}

void onednn_conv(Op op, const Shape& x, const Shape& w, const Shape& y, const ConvAttrs& a, const float* in0,
                 const float* in1, float* out) {
  const int64_t n = x[0], threads = thread_count();
  // Images are independent: one part of the batch per pool thread, each primitive on one
  // OpenMP thread (oneDNN's own team spin-waits at barriers and collapses on a loaded machine).
  // A batch smaller than the pool lets each part's primitive use the remaining threads.
  constexpr int64_t kMaxParts = 256;
  const int64_t parts = std::min({n, threads, kMaxParts});
  const int omp_threads = int(std::max<int64_t>(1, threads / parts));
  const int64_t xi = x[1] * x[2] * x[3], yi = y[1] * y[2] * y[3];
  std::array<Entry*, kMaxParts> used{};
  try {
    parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
      if (omp_get_max_threads() != omp_threads) omp_set_num_threads(omp_threads);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t b0 = n * p / parts, b1 = n * (p + 1) / parts;
        Shape xs = x, ys = y;
        xs[0] = ys[0] = b1 - b0;
        Entry& e = entry(op, xs, w, ys, a);
        used[size_t(p)] = &e;
        if (op == Op::conv2d) {
          run_entry(e, in0 + b0 * xi, in1, out + b0 * yi);
        } else if (op == Op::conv2d_backward_input) {
          run_entry(e, in0 + b0 * yi, in1, out + b0 * xi);
        } else {  // every part's weight gradient first goes to its own buffer, summed below
          float* dst = out;
          if (p > 0) {
            e.partial.resize(size_t(numel(w)));
            dst = e.partial.data();
          }
          run_entry(e, in0 + b0 * xi, in1 + b0 * yi, dst);
        }
      }
    });
  } catch (const dnnl::error& e) {
    kernel_error(op, std::string("oneDNN: ") + e.what());
  }
  if (op == Op::conv2d_backward_weight) {
    // A fixed order of parts: results are reproducible bit for bit.
    const int64_t nw = numel(w);
    parallel_for(nw, nw > kParallelMin ? 1 : INT64_MAX, [&](int64_t i0, int64_t i1) {
      for (int64_t p = 1; p < parts; ++p) {
        const float* part = used[size_t(p)]->partial.data();
        for (int64_t i = i0; i < i1; ++i) out[i] += part[i];
      }
    });
  }
}

}  // namespace meganeura::cpu
