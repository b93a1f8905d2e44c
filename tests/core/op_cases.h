// Cases of every op of the op table: each builds one op mid-graph from parameters (and i32
// inputs), with inputs drawn away from kinks and ties. The Vulkan parity test runs all of
// them; the gradient check runs those with gradients plus the ops only the CPU backend runs
// as such, so both backends are held to one list.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "graph/internal.h"
#include "graph/op_table.h"
#include "meganeura/graph.h"

namespace meganeura::op_cases {

struct Case {
  std::string name;
  Op op;
  std::function<Tensor(Graph&)> build;
  std::function<double(const std::string&, int64_t, std::mt19937&)> value;
  std::map<std::string, std::vector<int32_t>> int_inputs;
  bool zero_grad = false;
  // Forward bound: |got - f64| <= tol * (1 + |f64|); gradients get twice this (see the tests).
  double tol = 1e-4;
  // No gradients: an inference graph, where the rewrite passes fuse whole norm chains.
  bool forward_only = false;
};

// gtest prints a case by its name (not 176 bytes of its representation).
inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

inline double away_from_zero(const std::string&, int64_t, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0.05, 1.5);
  return (rng() & 1 ? 1 : -1) * u(rng);
}
inline double positive(const std::string&, int64_t, std::mt19937& rng) {
  return std::uniform_real_distribution<double>(0.3, 2.0)(rng);
}
// A shuffled grid with spacing 0.05: no ties within 0.05, so max/argmax are stable under h.
inline double distinct(const std::string& name, int64_t i, std::mt19937&) {
  return std::fmod(double(i) * 0.37, 1.0) * 3 - 1.5 + double(i) * 1e-3 + (name == "b" ? 0.013 : 0);
}

inline Tensor P(Graph& g, const std::string& name, Shape s) {
  return g.parameter(name, std::move(s), Init{Init::normal, 1});
}

inline std::vector<Case> cases() {
  using G = Graph;
  std::vector<Case> c;
  auto un = [&](Op op, std::function<Tensor(Tensor)> f, decltype(Case::value) v = nullptr) {
    c.push_back({std::string(op_name(op)), op, [f](G& g) { return f(P(g, "x", {3, 5})); }, v, {}});
  };
  un(Op::copy, [](Tensor x) { return copy(x); });
  c.push_back({"detach", Op::detach, [](G& g) { return detach(P(g, "x", {4})); }, nullptr, {}, true});
  un(Op::neg, [](Tensor x) { return neg(x); });
  un(Op::exp, [](Tensor x) { return exp(x); });
  un(
      Op::log, [](Tensor x) { return log(x); }, positive);
  un(
      Op::sqrt, [](Tensor x) { return sqrt(x); }, positive);
  un(
      Op::rsqrt, [](Tensor x) { return rsqrt(x); }, positive);
  un(
      Op::abs, [](Tensor x) { return abs(x); }, away_from_zero);
  un(Op::tanh, [](Tensor x) { return tanh(x); });
  un(Op::sigmoid, [](Tensor x) { return sigmoid(x); });
  un(
      Op::relu, [](Tensor x) { return relu(x); }, away_from_zero);
  un(Op::gelu_tanh, [](Tensor x) { return gelu(x, true); });
  un(Op::gelu_erf, [](Tensor x) { return gelu(x, false); });
  un(Op::silu, [](Tensor x) { return silu(x); });
  un(Op::softplus, [](Tensor x) { return softplus(x); });
  // Each of hardswish's three pieces, at least 0.5 from its kinks at -3 and 3.
  un(
      Op::hardswish, [](Tensor x) { return hardswish(x); },
      [](const std::string&, int64_t i, std::mt19937& rng) {
        static constexpr double centres[] = {-4.5, -1.5, 0.5, 4.5};
        return centres[i % 4] + std::uniform_real_distribution<double>(-1, 1)(rng);
      });
  un(Op::affine, [](Tensor x) { return affine(x, -1.7, 0.3); });
  un(Op::cast, [](Tensor x) { return cast(x, DType::f32); });
  un(
      Op::sign, [](Tensor x) { return sign(x) * x; }, away_from_zero);
  un(
      Op::positive_mask, [](Tensor x) { return positive_mask(x) * x; }, away_from_zero);
  un(Op::sin, [](Tensor x) { return sin(x); });
  un(Op::cos, [](Tensor x) { return cos(x); });
  c.push_back({"clip_coef",
               Op::clip_coef,
               [](G& g) {
                 Tensor x = P(g, "x", {});
                 return clip_coef(x * x, 100.0) * x;  // below the threshold: coefficient 1
               },
               nullptr,
               {}});
  auto bin = [&](Op op, std::function<Tensor(Tensor, Tensor)> f, Shape a, Shape b, const char* tag,
                 decltype(Case::value) v = nullptr) {
    c.push_back({std::string(op_name(op)) + tag, op, [=](G& g) { return f(P(g, "a", a), P(g, "b", b)); }, v, {}});
  };
  for (auto [a, b, tag] : {std::tuple{Shape{3, 4}, Shape{3, 4}, ""},
                           {Shape{2, 3, 4}, Shape{4}, "/bcast_row"},
                           {Shape{3, 1}, Shape{1, 4}, "/bcast_outer"},
                           {Shape{}, Shape{2, 3}, "/scalar"}}) {
    bin(
        Op::add, [](Tensor x, Tensor y) { return x + y; }, a, b, tag);
    bin(
        Op::sub, [](Tensor x, Tensor y) { return x - y; }, a, b, tag);
    bin(
        Op::mul, [](Tensor x, Tensor y) { return x * y; }, a, b, tag);
    bin(
        Op::div, [](Tensor x, Tensor y) { return x / y; }, a, b, tag, positive);
  }
  bin(
      Op::equal, [](Tensor x, Tensor y) { return equal(x, y) * x + y; }, {3, 4}, {3, 4}, "", distinct);
  bin(
      Op::maximum, [](Tensor x, Tensor y) { return maximum(x, y); }, {3, 4}, {1, 4}, "/bcast", distinct);
  bin(
      Op::less, [](Tensor x, Tensor y) { return less(x, y) * x + y; }, {3, 4}, {3, 4}, "", distinct);
  for (auto [axes, keep, tag] :
       {std::tuple{std::vector<int64_t>{}, false, "/all"}, {{1}, true, "/axis1_keep"}, {{0, 2}, false, "/axes02"}}) {
    const std::vector<int64_t> a = axes;  // clang 15 cannot capture structured bindings
    const bool k = keep;
    c.push_back({std::string("sum") + tag,
                 Op::sum,
                 [=](G& g) {
                   return sum(P(g, "x", {2, 3, 4}), a, k);
                 },
                 nullptr,
                 {}});
    c.push_back({std::string("mean") + tag,
                 Op::mean,
                 [=](G& g) {
                   return mean(P(g, "x", {2, 3, 4}), a, k);
                 },
                 nullptr,
                 {}});
    c.push_back({std::string("max") + tag,
                 Op::max,
                 [=](G& g) {
                   return max(P(g, "x", {2, 3, 4}), a, k);
                 },
                 distinct,
                 {}});
  }
  for (int64_t axis : {0, 1}) {
    c.push_back({"softmax/axis" + std::to_string(axis),
                 Op::softmax,
                 [=](G& g) {
                   return softmax(P(g, "x", {3, 5}), axis);
                 },
                 nullptr,
                 {}});
    c.push_back({"log_softmax/axis" + std::to_string(axis),
                 Op::log_softmax,
                 [=](G& g) {
                   return log_softmax(P(g, "x", {3, 5}), axis);
                 },
                 nullptr,
                 {}});
  }
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::string tag = std::string("/") + (ta ? "T" : "N") + (tb ? "T" : "N");
      c.push_back({"matmul" + tag,
                   Op::matmul,
                   [=](G& g) {
                     return matmul(P(g, "a", ta ? Shape{4, 3} : Shape{3, 4}), P(g, "b", tb ? Shape{5, 4} : Shape{4, 5}),
                                   ta, tb);
                   },
                   nullptr,
                   {}});
      c.push_back({"matmul/batched" + tag,
                   Op::matmul,
                   [=](G& g) {
                     return matmul(P(g, "a", ta ? Shape{2, 4, 3} : Shape{2, 3, 4}),
                                   P(g, "b", tb ? Shape{2, 5, 4} : Shape{2, 4, 5}), ta, tb);
                   },
                   nullptr,
                   {}});
      c.push_back({"matmul/shared_b" + tag,
                   Op::matmul,
                   [=](G& g) {
                     return matmul(P(g, "a", ta ? Shape{2, 4, 3} : Shape{2, 3, 4}),
                                   P(g, "b", tb ? Shape{5, 4} : Shape{4, 5}), ta, tb);
                   },
                   nullptr,
                   {}});
    }
  }
  c.push_back({"matmul/7x65x63",  // K and N past a 64-wide tile
               Op::matmul,
               [](G& g) {
                 return matmul(P(g, "a", {7, 65}), P(g, "b", {65, 63}));
               },
               nullptr,
               {}});
  c.push_back({"matmul/shared_a",
               Op::matmul,
               [](G& g) {
                 return matmul(P(g, "a", {3, 4}), P(g, "b", {2, 4, 5}));
               },
               nullptr,
               {}});
  struct ConvSpec {
    const char* tag;
    Shape x, w;
    Conv2dOptions o;
  };
  for (const auto& s : {ConvSpec{"/3x3", {2, 3, 5, 5}, {4, 3, 3, 3}, {}},
                        ConvSpec{"/stride2_pad1", {1, 2, 6, 5}, {3, 2, 3, 3}, {2, 2, 1, 1, 1, 1, 1}},
                        ConvSpec{"/dilation2", {1, 2, 7, 7}, {2, 2, 3, 3}, {1, 1, 2, 2, 2, 2, 1}},
                        ConvSpec{"/groups2", {1, 4, 5, 5}, {6, 2, 3, 3}, {1, 1, 1, 1, 1, 1, 2}},
                        ConvSpec{"/depthwise", {1, 3, 4, 4}, {3, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 3}},
                        ConvSpec{"/1x1", {2, 3, 3, 4}, {5, 3, 1, 1}, {}},
                        // The Vulkan kernels' other paths: a 7x7 stride-2 window (ResNet's first
                        // layer), channels in quads (staged channels-last), with groups and dilation.
                        ConvSpec{"/7x7_stride2_pad3", {1, 2, 11, 11}, {3, 2, 7, 7}, {2, 2, 3, 3, 1, 1, 1}},
                        ConvSpec{"/channels4_stride2", {1, 8, 7, 7}, {4, 8, 3, 3}, {2, 2, 1, 1, 1, 1, 1}},
                        ConvSpec{"/channels4_groups2_dilation2", {1, 8, 9, 9}, {8, 4, 3, 3}, {1, 1, 2, 2, 2, 2, 2}}}) {
    c.push_back({std::string("conv2d") + s.tag,
                 Op::conv2d,
                 [s](G& g) { return conv2d(P(g, "x", s.x), P(g, "w", s.w), s.o); },
                 nullptr,
                 {}});
  }
  c.push_back({"conv1d/stride2_pad1",
               Op::conv2d,
               [](G& g) {
                 return conv1d(P(g, "x", {2, 3, 9}), P(g, "w", {4, 3, 3}), 2, 1);
               },
               nullptr,
               {}});
  c.push_back({"max_pool2d/3s2p1",
               Op::max_pool2d,
               [](G& g) {
                 return max_pool2d(P(g, "x", {1, 2, 6, 6}), 3, 2, 1);
               },
               distinct,
               {}});
  c.push_back({"max_pool2d/2s2",
               Op::max_pool2d,
               [](G& g) {
                 return max_pool2d(P(g, "x", {2, 1, 4, 4}), 2, 2);
               },
               distinct,
               {}});
  c.push_back({"avg_pool2d/3s2p1",
               Op::avg_pool2d,
               [](G& g) {
                 return avg_pool2d(P(g, "x", {1, 2, 6, 6}), 3, 2, 1);
               },
               nullptr,
               {}});
  c.push_back({"global_avg_pool2d",
               Op::mean,
               [](G& g) {
                 return global_avg_pool2d(P(g, "x", {2, 3, 3, 3}));
               },
               nullptr,
               {}});
  c.push_back({"upsample_nearest2x",
               Op::upsample_nearest2x,
               [](G& g) {
                 return upsample_nearest2x(P(g, "x", {1, 2, 3, 2}));
               },
               nullptr,
               {}});
  c.push_back({"reshape",
               Op::reshape,
               [](G& g) {
                 return reshape(P(g, "x", {2, 6}), {3, -1}) * P(g, "y", {3, 4});
               },
               nullptr,
               {}});
  c.push_back({"permute", Op::permute, [](G& g) { return permute(P(g, "x", {2, 3, 4}), {2, 0, 1}); }, nullptr, {}});
  c.push_back({"slice", Op::slice, [](G& g) { return slice(P(g, "x", {4, 5}), {1, 0}, {3, 4}); }, nullptr, {}});
  c.push_back({"pad", Op::pad, [](G& g) { return pad(P(g, "x", {2, 3}), {1, 0}, {2, 1}); }, nullptr, {}});
  c.push_back({"concat",
               Op::concat,
               [](G& g) {
                 return concat({P(g, "a", {2, 3}), P(g, "b", {2, 1}), P(g, "c", {2, 2})}, 1);
               },
               nullptr,
               {}});
  c.push_back({"broadcast_to",
               Op::broadcast_to,
               [](G& g) {
                 return broadcast_to(P(g, "x", {3, 1}), {2, 3, 4});
               },
               nullptr,
               {}});
  c.push_back({"embedding",
               Op::embedding,
               [](G& g) {
                 return embedding(P(g, "table", {5, 3}), g.input("ids", {2, 3}, DType::i32));
               },
               nullptr,
               {{"ids", {4, 0, 2, 2, 1, 4}}}});
  c.push_back({"embedding_backward",
               Op::embedding_backward,
               [](G& g) {
                 return embedding_backward(P(g, "dy", {4, 3}), g.input("ids", {4}, DType::i32), 6);
               },
               nullptr,
               {{"ids", {5, 0, 5, 2}}}});
  c.push_back({"one_hot",
               Op::one_hot,
               [](G& g) {
                 return one_hot(g.input("ids", {4}, DType::i32), 3, -1) * P(g, "x", {4, 3});
               },
               nullptr,
               {{"ids", {2, -1, 0, 1}}}});
  c.push_back({"rope", Op::rope, [](G& g) { return rope(P(g, "x", {2, 5, 6}), 100.0); }, nullptr, {}});
  c.push_back({"rope/inverse",
               Op::rope,
               [](G& g) {
                 return rope(P(g, "x", {1, 2, 4, 4}), 10000.0, true);
               },
               nullptr,
               {}});
  // Llama 3 scaling over a 16-wide head: wavelengths 2 pi 10000^(i/8) = 6.3, 20, 63, 199, ...
  // against L / high = 16 and L / low = 64, so pair 0 is kept, pairs 1-2 blended, the rest divided.
  c.push_back({"rope/llama3",
               Op::rope,
               [](G& g) {
                 RopeAttrs a;
                 a.factor = 8;
                 a.low_freq_factor = 1;
                 a.high_freq_factor = 4;
                 a.original_max_position = 64;
                 return rope_scaled(P(g, "x", {1, 2, 5, 16}), a);
               },
               nullptr,
               {}});
  c.push_back({"rope/linear",
               Op::rope,
               [](G& g) {
                 RopeAttrs a;
                 a.theta = 500;
                 a.factor = 4;
                 return rope_scaled(P(g, "x", {2, 7, 6}), a);
               },
               nullptr,
               {}});
  c.push_back({"causal_mask",
               Op::causal_mask,
               [](G& g) {
                 return causal_mask(P(g, "x", {2, 3, 5}), 0.5);
               },
               nullptr,
               {}});
  c.push_back({"lr_schedule",
               Op::lr_schedule,
               [](G& g) {
                 Tensor s = P(g, "s", {});
                 return lr_schedule(s, ScheduleAttrs{0.1, 0, 0, 0}) * s;
               },
               nullptr,
               {}});
  c.push_back({"lr_schedule/i32_counter",
               Op::lr_schedule,
               [](G& g) {
                 return lr_schedule(g.input("t", {}, DType::i32), ScheduleAttrs{0.1, 10, 100, 0.01}) * P(g, "x", {});
               },
               nullptr,
               {{"t", {4}}}});
  // Adam's bias corrections at the first step (1 - 0.999 cancels in f32: a plain f32
  // 1 - pow(beta, t) is off by ~1.7e-4 relative) and late (t = 1000, c close to 1). The result
  // is one f32 rounding plus inversesqrt's 2 ulp away from the f64 value: 2e-6 relative.
  for (auto [t, beta, power, tag] : {std::tuple{0, 0.999, -0.5, "/first_step_rsqrt"},
                                     {0, 0.9, -1.0, "/first_step_inverse"},
                                     {999, 0.999, -0.5, "/late"},
                                     {2, 0.0, -1.0, "/beta0"}}) {
    const double b = beta, pw = power;  // clang 15 cannot capture structured bindings
    Case k{std::string("bias_correction") + tag,
           Op::bias_correction,
           [=](G& g) { return bias_correction(g.input("t", {}, DType::i32), b, pw) * P(g, "x", {}); },
           nullptr,
           {{"t", {t}}}};
    k.tol = 2e-6;
    c.push_back(k);
  }
  // The counter, seen through a cast: 41 + 1 times 1 is exact in f32, so only the f32 rounding
  // of the head's weights (6e-8 relative, in the gradient) is allowed. Counts beyond 2^24 are
  // checked on the i32 itself (VulkanOptim.CounterIsExactBeyondF32).
  Case inc{"increment",
           Op::increment,
           [](G& g) { return cast(increment(g.input("n", {}, DType::i32)), DType::f32) * P(g, "x", {}); },
           [](const std::string&, int64_t, std::mt19937&) { return 1.0; },
           {{"n", {41}}}};
  inc.tol = 1e-7;
  c.push_back(inc);
  // The fused ops the rewrite passes create (Session::add runs them): norms and scaled softmax
  // in inference graphs; pointwise chains, fused reductions and matmul epilogues in the
  // training graphs of the cases above and below. Long rows (300 > one workgroup) take the
  // strided path of the row kernels.
  auto fwd = [&](std::string name, Op op, std::function<Tensor(G&)> f) {
    Case k{std::move(name), op, std::move(f), nullptr, {}};
    k.forward_only = true;
    c.push_back(k);
  };
  // The precision contracts' operand rounding (apply_precision makes these nodes after
  // autodiff, so they have no gradient): every backend rounds exactly alike, the oracle in f64.
  for (Op op : {Op::round_f16, Op::round_bf16}) {
    fwd(std::string(op_name(op)), op, [op](G& g) {
      Tensor x = P(g, "x", {4, 8});
      return graph_internal::add_node(g, op, NoAttrs{}, {x.id}, x.type());
    });
  }
  c.push_back({"rope_at",
               Op::rope_at,
               [](G& g) {
                 return rope_at(P(g, "x", {2, 3, 6}), g.input("off", {1}, DType::i32), 100.0);
               },
               nullptr,
               {{"off", {7}}}});
  c.push_back({"rope_at/llama3",
               Op::rope_at,
               [](G& g) {
                 RopeAttrs a;
                 a.factor = 8;
                 a.low_freq_factor = 1;
                 a.high_freq_factor = 4;
                 a.original_max_position = 64;
                 return rope_at_scaled(P(g, "x", {1, 2, 3, 16}), g.input("off", {1}, DType::i32), a);
               },
               nullptr,
               {{"off", {40}}}});
  // The key/value cache ops are for inference only: forward cases. The write's output is a
  // temporary here (the cache is a parameter), so its kernel copies the cache first.
  auto kv = [&](std::string name, Op op, std::function<Tensor(G&)> f, int32_t pos) {
    Case k{std::move(name), op, std::move(f), nullptr, {{"pos", {pos}}}};
    k.forward_only = true;
    c.push_back(k);
  };
  kv(
      "kv_cache_write", Op::kv_cache_write,
      [](G& g) {
        return kv_cache_write(P(g, "cache", {2, 2, 6, 4}), P(g, "rows", {2, 2, 2, 4}), g.input("pos", {1}, DType::i32));
      },
      3);
  kv(
      "cached_attention/decode_gqa", Op::cached_attention,
      [](G& g) {
        return cached_attention(P(g, "q", {1, 4, 1, 8}), P(g, "k", {1, 2, 9, 8}), P(g, "v", {1, 2, 9, 6}),
                                g.input("pos", {1}, DType::i32));
      },
      6);
  kv(
      "cached_attention/prefill_window", Op::cached_attention,
      [](G& g) {
        return cached_attention(P(g, "q", {2, 2, 3, 4}), P(g, "k", {2, 1, 8, 4}), P(g, "v", {2, 1, 8, 4}),
                                g.input("pos", {1}, DType::i32), 2);
      },
      4);
  fwd("norm/rms", Op::norm, [](G& g) { return rms_norm(P(g, "x", {3, 6}), P(g, "g", {6})); });
  fwd("norm/layer_long_rows", Op::norm, [](G& g) {
    return layer_norm(P(g, "x", {2, 300}), P(g, "g", {300}), P(g, "b", {300}));
  });
  fwd("softmax_scaled/causal", Op::softmax_scaled, [](G& g) {
    return softmax(causal_mask(P(g, "x", {2, 3, 5}) * 0.5, -1e9), -1);
  });
  // top_k: inference only; rows longer than a workgroup, values apart (no ties to order).
  fwd("top_k", Op::top_k, [](G& g) { return top_k_packed(P(g, "x", {3, 300}), 7); });
  // matmul_q: weights in block formats, rounded as they are set (both sides hold the same
  // blocks); a Q8_0 weight of one block (34 bytes, not whole words) and Q4_0 over two blocks.
  fwd("matmul_q/q8_0", Op::matmul_q, [](G& g) {
    return matmul_q(P(g, "x", {2, 3, 32}), g.parameter("w", {1, 32}, Init{Init::normal, 1}, DType::q8_0));
  });
  fwd("matmul_q/q4_0", Op::matmul_q, [](G& g) {
    return matmul_q(P(g, "x", {5, 64}), g.parameter("w", {7, 64}, Init{Init::normal, 1}, DType::q4_0));
  });
  {
    Case k{"embedding/q4_0_table",
           Op::embedding,
           [](G& g) {
             return embedding(g.parameter("table", {5, 64}, Init{Init::normal, 1}, DType::q4_0),
                              g.input("ids", {2, 3}, DType::i32));
           },
           nullptr,
           {{"ids", {4, 0, 2, 2, 1, 3}}}};
    k.forward_only = true;
    c.push_back(k);
  }
  fwd("softmax_scaled/long_rows", Op::softmax_scaled, [](G& g) { return softmax(P(g, "x", {2, 300}) * 0.7, -1); });
  // Many short rows (>= 64 rows of <= 256): one invocation per row instead of a workgroup.
  fwd("norm/rms_many_rows", Op::norm, [](G& g) { return rms_norm(P(g, "x", {80, 16}), P(g, "g", {16})); });
  fwd("softmax_scaled/causal_many_rows", Op::softmax_scaled, [](G& g) {
    return softmax(causal_mask(P(g, "x", {2, 40, 40}) * 0.3, -1e9), -1);
  });
  c.push_back({"fused_reduce/many_rows",
               Op::fused_reduce,
               [](G& g) {
                 Tensor x = P(g, "x", {70, 7});
                 return sum(x * x, {1}, true) * P(g, "y", {70, 1});
               },
               nullptr,
               {}});
  c.push_back({"matmul_epilogue/bias_gelu_residual",
               Op::matmul_epilogue,
               [](G& g) {
                 Tensor r = P(g, "r", {3, 5});
                 return gelu(matmul(P(g, "a", {3, 4}), P(g, "w", {4, 5})) + P(g, "b", {5})) + r;
               },
               nullptr,
               {}});
  c.push_back({"fused_reduce/mean_of_squares",
               Op::fused_reduce,
               [](G& g) {
                 Tensor x = P(g, "x", {4, 7});
                 return mean(x * x + 1.0, {1}, true) * P(g, "y", {4, 1});
               },
               nullptr,
               {}});
  // Compositions used by the workloads.
  c.push_back({"layer_norm",
               Op::rsqrt,
               [](G& g) {
                 return layer_norm(P(g, "x", {3, 6}), P(g, "g", {6}), P(g, "b", {6}));
               },
               nullptr,
               {}});
  c.push_back({"rms_norm", Op::rsqrt, [](G& g) { return rms_norm(P(g, "x", {3, 6}), P(g, "g", {6})); }, nullptr, {}});
  c.push_back({"group_norm",
               Op::rsqrt,
               [](G& g) {
                 return group_norm(P(g, "x", {2, 4, 3, 3}), 2, P(g, "g", {4}), P(g, "b", {4}));
               },
               nullptr,
               {}});
  c.push_back({"swiglu", Op::silu, [](G& g) { return swiglu(P(g, "a", {3, 4}), P(g, "b", {3, 4})); }, nullptr, {}});
  c.push_back({"attention/causal_gqa",
               Op::softmax,
               [](G& g) {
                 return attention(P(g, "q", {1, 4, 3, 4}), P(g, "k", {1, 2, 3, 4}), P(g, "v", {1, 2, 3, 4}), true);
               },
               nullptr,
               {}});
  c.push_back({"attention/cross",
               Op::softmax,
               [](G& g) {
                 return attention(P(g, "q", {2, 2, 3, 4}), P(g, "k", {2, 2, 5, 4}), P(g, "v", {2, 2, 5, 3}), false);
               },
               nullptr,
               {}});
  c.push_back({"cross_entropy/ignore",
               Op::softmax_cross_entropy,
               [](G& g) {
                 return cross_entropy(P(g, "logits", {4, 5}), g.input("t", {4}, DType::i32), -100);
               },
               nullptr,
               {{"t", {3, -100, 0, 4}}}});
  c.push_back({"cross_entropy/all_ignored_but_one",
               Op::softmax_cross_entropy,
               [](G& g) {
                 return softmax_cross_entropy(P(g, "logits", {3, 4}), g.input("t", {3}, DType::i32), 1);
               },
               nullptr,
               {{"t", {1, 2, 1}}}});
  c.push_back({"maximum/bcast_row",
               Op::maximum,
               [](G& g) {
                 return maximum(P(g, "a", {2, 3, 4}), P(g, "b", {4}));
               },
               distinct,
               {}});
  c.push_back({"where",
               Op::where,
               [](G& g) {
                 Tensor a = P(g, "a", {3, 4}), b = P(g, "b", {3, 4});
                 return where(less(a, b), a * b, exp(b));
               },
               distinct,
               {}});
  c.push_back({"where/bcast",
               Op::where,
               [](G& g) {
                 Tensor c0 = P(g, "c", {3, 1}), a = P(g, "a", {3, 4}), b = P(g, "b", {});
                 return where(positive_mask(c0), a, b);
               },
               away_from_zero,
               {}});
  c.push_back({"gather/axis1",
               Op::gather,
               [](G& g) {
                 return gather(P(g, "x", {3, 5, 2}), 1, g.input("i", {4}, DType::i32));
               },
               nullptr,
               {{"i", {4, 0, 4, 2}}}});
  c.push_back({"gather/axis0",
               Op::gather,
               [](G& g) {
                 return gather(P(g, "x", {4, 3}), 0, g.input("i", {2}, DType::i32));
               },
               nullptr,
               {{"i", {3, 1}}}});
  c.push_back({"gather_backward",
               Op::gather_backward,
               [](G& g) {
                 return gather_backward(P(g, "dy", {2, 3}), g.input("i", {3}, DType::i32), 1, 5);
               },
               nullptr,
               {{"i", {1, 1, 4}}}});
  c.push_back({"batch_norm/train",
               Op::rsqrt,
               [](G& g) {
                 Tensor rm = g.state("rm", {3}), rv = g.state("rv", {3}, Init{Init::ones});
                 return batch_norm_train(P(g, "x", {2, 3, 2, 2}), P(g, "g", {3}), P(g, "b", {3}), rm, rv);
               },
               nullptr,
               {}});
  c.push_back({"batch_norm/inference",
               Op::rsqrt,
               [](G& g) {
                 return batch_norm_inference(P(g, "x", {2, 3, 2}), P(g, "g", {3}), P(g, "b", {3}), P(g, "m", {3}),
                                             P(g, "v", {3}));
               },
               [](const std::string& name, int64_t i, std::mt19937& rng) {
                 return name == "v" ? positive(name, i, rng) : std::normal_distribution<double>(0, 1)(rng);
               },
               {}});
  c.push_back(
      {"timestep_embedding", Op::sin, [](G& g) { return timestep_embedding(P(g, "t", {3}), 8, 100.0); }, nullptr, {}});
  c.push_back({"attention_fused/causal_gqa",
               Op::attention_fused,
               [](G& g) {
                 // Both parts of the packed output (out and lse) feed the loss.
                 return attention_fused_packed(P(g, "q", {1, 4, 5, 3}), P(g, "k", {1, 2, 7, 3}),
                                               P(g, "v", {1, 2, 7, 2}), true, 0.6);
               },
               nullptr,
               {}});
  c.push_back({"attention_fused/cross",
               Op::attention_fused,
               [](G& g) {
                 return attention_fused_packed(P(g, "q", {2, 2, 3, 4}), P(g, "k", {2, 2, 4, 4}),
                                               P(g, "v", {2, 2, 4, 3}), false, 0.5);
               },
               nullptr,
               {}});
  // Long rows: the row kernels' strided loops and tree reductions over more than one pass.
  c.push_back({"cross_entropy/wide",
               Op::softmax_cross_entropy,
               [](G& g) {
                 return softmax_cross_entropy(P(g, "logits", {5, 600}), g.input("t", {5}, DType::i32), -100);
               },
               nullptr,
               {{"t", {599, 0, -100, 311, 7}}}});
  // An unselected branch of -inf must not leak into the result (as 0 * -inf would).
  c.push_back({"where/infinite_branch",
               Op::where,
               [](G& g) {
                 Tensor a = P(g, "a", {4, 6}), b = P(g, "b", {4, 6});
                 return exp(where(less(a, b), a, g.constant(std::vector<double>(24, -INFINITY), {4, 6})));
               },
               distinct,
               {},
               false,
               1e-4,
               true});
  c.push_back({"attention_fused/head64",
               Op::attention_fused,
               [](G& g) {
                 return attention_fused_packed(P(g, "q", {1, 2, 9, 64}), P(g, "k", {1, 1, 11, 64}),
                                               P(g, "v", {1, 1, 11, 40}), true, 0.125);
               },
               nullptr,
               {}});
  c.push_back({"mse", Op::mean, [](G& g) { return mse(P(g, "p", {3, 4}), P(g, "t", {3, 4})); }, nullptr, {}});
  return c;
}

}  // namespace meganeura::op_cases
