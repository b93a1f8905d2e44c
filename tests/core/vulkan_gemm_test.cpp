// The GEMM kernels (matmul, the fused matmul epilogue, the convolutions as implicit GEMMs) on
// Vulkan, each kernel family forced in turn (VulkanOptions::kernels), validation on, against
// references computed here in double from the same f32 inputs: edge shapes (M, N, K of 1, 7,
// 63, 65, 1000) under every transpose, batched and shared operands, K split across workgroups,
// fused epilogues, and strided, padded, dilated, grouped and depthwise convolutions with both
// gradients. The launches' planned loop iterations are checked against the loop budget, and a
// K long enough that an unplanned loop would pass lavapipe's 65,535-iteration limit is run.
//
// Tolerance of a sum of n products (any order, with or without fused multiply-adds, K split or
// not): |computed - exact| <= gamma * sum |a_i b_i|, gamma = (n + 66) * 2^-24 (Higham's
// gamma_n for f32 with the splits' reduction adding at most 64 more additions); the inputs are
// f32, so the double reference is exact to 1e-16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/vulkan/lowering.h"
#include "graph/internal.h"
#include "graph/op_table.h"
#include "meganeura/autodiff.h"
#include "meganeura/passes.h"
#include "meganeura/workloads.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

using Kernels = VulkanOptions::Kernels;
using Values = std::map<std::string, std::vector<float>>;
const Kernels kFamilies[] = {Kernels::direct, Kernels::shared_memory};
const char* family_name(Kernels k) { return k == Kernels::direct ? "direct" : "shared_memory"; }

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  std::mt19937_64 r(seed);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(r);
  return v;
}

// The graph on a fresh Vulkan backend with the family forced: outputs by name; `planned` gets
// the program and `device` the device it ran on.
// epilogue: fuse matmul epilogues also where the backend's own passes do not (CPU-emulated
// devices), to test the GEMM kernels with a program.
Values run(Graph& g, Kernels family, const Values& inputs, Program* planned = nullptr,
           VulkanDeviceInfo* device = nullptr, bool epilogue = false) {
  VulkanOptions o;
  o.validation = testing_vulkan::validation_wanted();
  o.pipeline_cache = false;
  o.kernels = family;
  auto b = make_vulkan_backend(o);
  PassOptions passes = b->passes();
  passes.matmul_epilogue = passes.matmul_epilogue || epilogue;
  const Program p = plan(optimize(g, passes), PlanOptions{DType::f32, b->limits()});
  if (planned) *planned = p;
  for (const VulkanDeviceInfo& d : vulkan_devices()) {
    if (device && b->device_name() == "vulkan: " + d.name + " (" + d.type + ")") *device = d;
  }
  const size_t index = b->add_program(p);
  for (const auto& [name, v] : inputs) b->write(name, v.data(), v.size() * 4);
  b->run(index);
  Values out;
  for (const ExternalBuffer& e : p.externals) {
    if (e.role != Role::output) continue;
    std::vector<float> v(size_t(e.type.numel()));
    b->read(e.name, v.data(), v.size() * 4);
    out[e.name] = std::move(v);
  }
  return out;
}

// Elementwise within gamma * bound (bound: sum |a_i b_i| per output, n terms).
void expect_within(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& bound,
                   int64_t n, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double gamma = double(n + 66) * std::ldexp(1.0, -24);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], gamma * bound[i] + 1e-30) << what << " at " << i;
  }
}

struct Product {
  int64_t m, n, k;
  bool ta, tb;
};

TEST(VulkanGemm, EdgeShapesUnderEveryTransposeMatchDouble) {
  MEGANEURA_REQUIRE_VULKAN();
  const int64_t shapes[][3] = {{1, 1, 1},     {7, 7, 7},     {63, 65, 7},   {65, 63, 63},  {1, 65, 1000},
                               {1000, 1, 65}, {7, 1000, 63}, {65, 7, 1000}, {1000, 63, 1}, {1000, 1000, 65}};
  std::vector<Product> products;
  for (const auto& s : shapes) {
    for (int t = 0; t < 4; ++t) products.push_back({s[0], s[1], s[2], (t & 1) != 0, (t & 2) != 0});
  }
  Graph g;
  Values in;
  for (size_t i = 0; i < products.size(); ++i) {
    const Product& p = products[i];
    const std::string id = std::to_string(i);
    Tensor a = g.input("a" + id, p.ta ? Shape{p.k, p.m} : Shape{p.m, p.k});
    Tensor b = g.input("b" + id, p.tb ? Shape{p.n, p.k} : Shape{p.k, p.n});
    g.output("c" + id, matmul(a, b, p.ta, p.tb));
    in["a" + id] = random_floats(p.m * p.k, 2 * i + 1);
    in["b" + id] = random_floats(p.k * p.n, 2 * i + 2);
  }
  for (Kernels family : kFamilies) {
    const Values out = run(g, family, in);
    for (size_t i = 0; i < products.size(); ++i) {
      const Product& p = products[i];
      const std::string id = std::to_string(i);
      const std::vector<float>&a = in.at("a" + id), &b = in.at("b" + id);
      std::vector<double> want(size_t(p.m * p.n)), bound(want.size());
      for (int64_t r = 0; r < p.m; ++r) {
        for (int64_t c = 0; c < p.n; ++c) {
          double s = 0, abs_sum = 0;
          for (int64_t k = 0; k < p.k; ++k) {
            const double x = a[size_t(p.ta ? k * p.m + r : r * p.k + k)],
                         y = b[size_t(p.tb ? c * p.k + k : k * p.n + c)];
            s += x * y;
            abs_sum += std::abs(x * y);
          }
          want[size_t(r * p.n + c)] = s;
          bound[size_t(r * p.n + c)] = abs_sum;
        }
      }
      expect_within(out.at("c" + id), want, bound, p.k,
                    std::string(family_name(family)) + " " + std::to_string(p.m) + "x" + std::to_string(p.n) + "x" +
                        std::to_string(p.k) + (p.ta ? " T" : " N") + (p.tb ? "T" : "N"));
    }
  }
}

// Batched products, and one operand shared by every batch (a weight), both transposed or not.
TEST(VulkanGemm, BatchedAndSharedOperandsMatchDouble) {
  MEGANEURA_REQUIRE_VULKAN();
  const int64_t B = 3, M = 65, N = 63, K = 67;
  Graph g;
  Values in;
  int id = 0;
  struct Case {
    bool a_batched, b_batched, ta, tb;
  };
  std::vector<Case> cases;
  for (int t = 0; t < 4; ++t) {
    for (auto [ab, bb] : {std::pair{true, true}, {true, false}, {false, true}})
      cases.push_back({ab, bb, (t & 1) != 0, (t & 2) != 0});
  }
  for (const Case& c : cases) {
    const std::string s = std::to_string(id++);
    Shape as = c.ta ? Shape{K, M} : Shape{M, K}, bs = c.tb ? Shape{N, K} : Shape{K, N};
    if (c.a_batched) as.insert(as.begin(), B);
    if (c.b_batched) bs.insert(bs.begin(), B);
    g.output("c" + s, matmul(g.input("a" + s, as), g.input("b" + s, bs), c.ta, c.tb));
    in["a" + s] = random_floats(numel(as), uint64_t(100 + id));
    in["b" + s] = random_floats(numel(bs), uint64_t(200 + id));
  }
  for (Kernels family : kFamilies) {
    const Values out = run(g, family, in);
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const std::string s = std::to_string(i);
      const std::vector<float>&a = in.at("a" + s), &b = in.at("b" + s);
      std::vector<double> want(size_t(B * M * N)), bound(want.size());
      for (int64_t t = 0; t < B; ++t) {
        const size_t ao = c.a_batched ? size_t(t * M * K) : 0, bo = c.b_batched ? size_t(t * K * N) : 0;
        for (int64_t r = 0; r < M; ++r) {
          for (int64_t col = 0; col < N; ++col) {
            double sum = 0, abs_sum = 0;
            for (int64_t k = 0; k < K; ++k) {
              const double x = a[ao + size_t(c.ta ? k * M + r : r * K + k)];
              const double y = b[bo + size_t(c.tb ? col * K + k : k * N + col)];
              sum += x * y;
              abs_sum += std::abs(x * y);
            }
            want[size_t((t * M + r) * N + col)] = sum;
            bound[size_t((t * M + r) * N + col)] = abs_sum;
          }
        }
      }
      expect_within(out.at("c" + s), want, bound, K,
                    std::string(family_name(family)) + " case " + s + (c.a_batched ? " A batched" : " A shared") +
                        (c.b_batched ? " B batched" : " B shared"));
    }
  }
}

// gelu(A W + bias) + residual, fused into the GEMM (a matmul_epilogue dispatch), with K split
// (7 x 7 outputs over K = 1000: too few tiles to fill a device) and unsplit. Tolerance: the
// product's bound, carried through gelu (slope below 1.13) and two f32 additions, plus the
// erf approximation's 1.5e-7 and gelu's few f32 roundings, 1e-6 * (1 + |y|).
TEST(VulkanGemm, FusedEpilogueMatchesDouble) {
  MEGANEURA_REQUIRE_VULKAN();
  const int64_t shapes[][3] = {{7, 7, 1000}, {130, 68, 63}};
  Graph g;
  Values in;
  for (int i = 0; i < 2; ++i) {
    const int64_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
    const std::string s = std::to_string(i);
    Tensor y = matmul(g.input("a" + s, {M, K}), g.input("w" + s, {K, N})) + g.input("bias" + s, {N});
    g.output("y" + s, gelu(y, false) + g.input("r" + s, {M, N}));
    in["a" + s] = random_floats(M * K, 11 + uint64_t(i));
    in["w" + s] = random_floats(K * N, 21 + uint64_t(i));
    in["bias" + s] = random_floats(N, 31 + uint64_t(i));
    in["r" + s] = random_floats(M * N, 41 + uint64_t(i));
  }
  for (Kernels family : kFamilies) {
    Program p;
    const Values out = run(g, family, in, &p, nullptr, true);
    size_t fused = 0;
    for (const Dispatch& d : p.dispatches) fused += d.op == Op::matmul_epilogue;
    ASSERT_EQ(fused, 2u) << "the epilogues were not fused into the products";
    for (int i = 0; i < 2; ++i) {
      const int64_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
      const std::string s = std::to_string(i);
      const auto &a = in.at("a" + s), &w = in.at("w" + s), &bias = in.at("bias" + s), &r = in.at("r" + s);
      const std::vector<float>& got = out.at("y" + s);
      for (int64_t row = 0; row < M; ++row) {
        for (int64_t col = 0; col < N; ++col) {
          double c = 0, abs_sum = 0;
          for (int64_t k = 0; k < K; ++k) {
            c += double(a[size_t(row * K + k)]) * w[size_t(k * N + col)];
            abs_sum += std::abs(double(a[size_t(row * K + k)]) * w[size_t(k * N + col)]);
          }
          const double x = c + bias[size_t(col)],
                       want = 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))) + r[size_t(row * N + col)];
          const double tol = 1.13 * double(K + 66) * std::ldexp(1.0, -24) * abs_sum + 1e-6 * (1 + std::abs(want));
          ASSERT_NEAR(got[size_t(row * N + col)], want, tol)
              << family_name(family) << " case " << i << " at " << row << "," << col;
        }
      }
    }
  }
}

struct ConvCase {
  const char* name;
  Shape x, w;
  Conv2dOptions o;
};

// Forward, input gradient and weight gradient in double, by scattering every product of the
// forward sum into both gradients (the kernels gather instead), with sum |products| bounds.
struct ConvReference {
  std::vector<double> y, dx, dw, y_bound, dx_bound, dw_bound;
};
ConvReference conv_reference(const ConvCase& c, const Shape& ys, const std::vector<float>& x,
                             const std::vector<float>& w, const std::vector<float>& dy) {
  const int64_t N = c.x[0], C = c.x[1], H = c.x[2], W = c.x[3], O = c.w[0], KH = c.w[2], KW = c.w[3];
  const int64_t OH = ys[2], OW = ys[3], G = c.o.groups, cg = C / G, og = O / G;
  ConvReference r;
  r.y.assign(size_t(numel(ys)), 0);
  r.y_bound = r.y;
  r.dx.assign(x.size(), 0);
  r.dx_bound = r.dx;
  r.dw.assign(w.size(), 0);
  r.dw_bound = r.dw;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          const size_t yi = size_t(((n * O + o) * OH + oy) * OW + ox);
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < KH; ++i)
              for (int64_t j = 0; j < KW; ++j) {
                const int64_t iy = oy * c.o.stride_h - c.o.pad_h + i * c.o.dilation_h;
                const int64_t ix = ox * c.o.stride_w - c.o.pad_w + j * c.o.dilation_w;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                const size_t xi = size_t(((n * C + (o / og) * cg + ci) * H + iy) * W + ix);
                const size_t wi = size_t(((o * cg + ci) * KH + i) * KW + j);
                r.y[yi] += double(x[xi]) * w[wi];
                r.y_bound[yi] += std::abs(double(x[xi]) * w[wi]);
                r.dx[xi] += double(dy[yi]) * w[wi];
                r.dx_bound[xi] += std::abs(double(dy[yi]) * w[wi]);
                r.dw[wi] += double(dy[yi]) * x[xi];
                r.dw_bound[wi] += std::abs(double(dy[yi]) * x[xi]);
              }
        }
  return r;
}

TEST(VulkanConv, ForwardAndGradientsMatchDouble) {
  MEGANEURA_REQUIRE_VULKAN();
  const ConvCase cases[] = {
      {"3x3", {2, 5, 9, 9}, {6, 5, 3, 3}, {1, 1, 1, 1, 1, 1, 1}},
      {"stride2_pad1", {2, 3, 11, 10}, {4, 3, 3, 3}, {2, 2, 1, 1, 1, 1, 1}},
      {"dilation2", {1, 3, 12, 12}, {4, 3, 3, 3}, {1, 1, 2, 2, 2, 2, 1}},
      {"groups2", {2, 6, 8, 8}, {8, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 2}},
      {"depthwise", {2, 8, 9, 9}, {8, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 8}},
      {"depthwise_multiplier2_stride2", {1, 4, 10, 10}, {8, 1, 3, 3}, {2, 2, 1, 1, 1, 1, 4}},
      {"1x1", {2, 16, 6, 6}, {8, 16, 1, 1}, {}},
      {"1x1_odd_pixels", {1, 5, 5, 5}, {7, 5, 1, 1}, {}},
      {"1x1_stride2", {2, 8, 8, 8}, {16, 8, 1, 1}, {2, 2, 0, 0, 1, 1, 1}},
      {"7x7_stride2_pad3", {1, 3, 32, 32}, {8, 3, 7, 7}, {2, 2, 3, 3, 1, 1, 1}},
      {"3x2_mixed", {1, 4, 9, 11}, {5, 4, 3, 2}, {2, 1, 0, 2, 1, 2, 1}},
  };
  Graph g;
  Values in;
  std::vector<Shape> out_shapes;
  for (size_t i = 0; i < std::size(cases); ++i) {
    const ConvCase& c = cases[i];
    const std::string s = std::to_string(i);
    Tensor x = g.input("x" + s, c.x), w = g.input("w" + s, c.w);
    Tensor y = conv2d(x, w, c.o);
    out_shapes.push_back(y.shape());
    Tensor dy = g.input("dy" + s, y.shape());
    ConvAttrs a{
        {c.o.stride_h, c.o.stride_w}, {c.o.pad_h, c.o.pad_w}, {c.o.dilation_h, c.o.dilation_w}, c.o.groups, c.x};
    g.output("y" + s, y);
    g.output("dx" + s, conv2d_backward_input(dy, w, a));
    a.grad_shape = c.w;
    g.output("dw" + s, conv2d_backward_weight(x, dy, a));
    in["x" + s] = random_floats(numel(c.x), 300 + i);
    in["w" + s] = random_floats(numel(c.w), 400 + i);
    in["dy" + s] = random_floats(numel(y.shape()), 500 + i);
  }
  for (Kernels family : kFamilies) {
    const Values out = run(g, family, in);
    for (size_t i = 0; i < std::size(cases); ++i) {
      const ConvCase& c = cases[i];
      const std::string s = std::to_string(i), what = std::string(family_name(family)) + " " + c.name;
      const ConvReference r = conv_reference(c, out_shapes[i], in.at("x" + s), in.at("w" + s), in.at("dy" + s));
      const int64_t window = c.w[1] * c.w[2] * c.w[3];
      const int64_t pixels = out_shapes[i][0] * out_shapes[i][2] * out_shapes[i][3];
      expect_within(out.at("y" + s), r.y, r.y_bound, window, what + " forward");
      expect_within(out.at("dx" + s), r.dx, r.dx_bound, (c.w[0] / c.o.groups) * c.w[2] * c.w[3],
                    what + " input gradient");
      expect_within(out.at("dw" + s), r.dw, r.dw_bound, pixels, what + " weight gradient");
    }
  }
}

// A K of 2^22: one invocation would loop 2^20 (direct) or 2^18 (shared memory) times; the
// lowering splits K so that no invocation runs more than the budget's 32,768, and lavapipe,
// which silently leaves every loop of an invocation after 65,535 iterations in all, returns
// the exact sum (2^22 products of 1 and 0.25 are exact in f32) only if no loop runs unplanned.
// The same for the weight gradient of a convolution over 2^22 pixels.
TEST(VulkanGemm, LongKStaysWithinTheLoopBudget) {
  MEGANEURA_REQUIRE_VULKAN();
  const int64_t K = int64_t(1) << 22;
  Graph g;
  g.output("c", matmul(g.input("a", {1, K}), g.input("b", {K, 1})));
  ConvAttrs a{{1, 1}, {0, 0}, {1, 1}, 1, {1, 1, 1, 1}};
  g.output("dw", conv2d_backward_weight(g.input("x", {1, 1, 1, K}), g.input("dy", {1, 1, 1, K}), a));
  const Values in = {{"a", std::vector<float>(size_t(K), 1.0f)},
                     {"b", std::vector<float>(size_t(K), 0.25f)},
                     {"x", std::vector<float>(size_t(K), 0.25f)},
                     {"dy", std::vector<float>(size_t(K), 1.0f)}};
  for (Kernels family : kFamilies) {
    Program p;
    VulkanDeviceInfo device;
    const Values out = run(g, family, in, &p, &device);
    EXPECT_EQ(out.at("c")[0], float(K) / 4) << family_name(family);
    EXPECT_EQ(out.at("dw")[0], float(K) / 4) << family_name(family);
    ASSERT_FALSE(device.name.empty());
    const vk::DeviceClass dc = vk::device_class(device, family);
    for (const vk::Launch& l : vk::lower_program(p, dc)) {
      EXPECT_GT(l.loop_iterations, 0u) << family_name(family);
      EXPECT_LE(l.loop_iterations, dc.loop_budget) << family_name(family);
    }
  }
}

// Planning only: for the five workloads' full-scale training graphs, on a CPU-emulated device
// (lavapipe's limits) and a discrete GPU's, every GEMM launch stays within the loop budget and
// the device's workgroup, shared-memory and binding limits.
TEST(VulkanGemmPlan, WorkloadLaunchesStayWithinTheDeviceLimits) {
  const VulkanDeviceInfo cpu = testing_vulkan::lavapipe_like_device(), gpu = testing_vulkan::gpu_like_device();
  for (const models::WorkloadInfo& w : models::workload_list()) {
    Graph g;
    models::Workload built = models::build_workload(g, w.id, models::Scale::full);
    std::vector<Tensor> params;
    for (NodeId id : g.parameters()) params.push_back(g.tensor(id));
    const std::vector<Tensor> grads = grad(built.loss, params);
    g.output("loss", built.loss);
    for (size_t i = 0; i < grads.size(); ++i) g.output("grad." + std::to_string(i), grads[i]);
    for (const VulkanDeviceInfo& info : {cpu, gpu}) {
      const vk::DeviceClass dc = vk::device_class(info);
      DeviceLimits limits;
      limits.max_binding_bytes = info.max_storage_buffer_range;
      limits.max_allocation_bytes = info.max_memory_allocation_size;
      limits.offset_alignment = 16;
      PassOptions passes;
      passes.strided_reductions = false;  // as the Vulkan backend plans
      const Program p = plan(optimize(g, passes), PlanOptions{DType::f32, limits});
      size_t gemms = 0;
      for (const vk::Launch& l : vk::lower_program(p, dc)) {
        if (l.kernel != vk::Kernel::matmul && l.kernel != vk::Kernel::matmul_fused && l.kernel != vk::Kernel::conv)
          continue;
        ++gemms;
        const std::string what = w.id + " on " + info.name + ": " + std::string(op_name(p.dispatches[l.dispatch].op));
        if (l.spec[1] < 2) {  // not a staging copy (which has no loop)
          EXPECT_GT(l.loop_iterations, 0u) << what;
        }
        EXPECT_LE(l.loop_iterations, dc.loop_budget) << what;
        EXPECT_LE(l.spec[0], dc.max_workgroup()) << what;
        EXPECT_LE(l.workspace_bytes, info.max_storage_buffer_range) << what;
      }
      EXPECT_GT(gemms, 0u) << w.id;
    }
  }
}

}  // namespace
}  // namespace meganeura
