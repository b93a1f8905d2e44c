// Gradient checks for every op of the op table: autodiff in the f64 oracle against central
// finite differences, with the op placed mid-graph (its output is weighted by a fixed,
// non-uniform tensor before the sum, so a rule that ignores its upstream gradient fails).
// The f32 forward is compared with the f64 oracle too.
//
// Tolerances: with h = 1e-6 in f64 the central difference has truncation error ~h^2*|f'''| and
// round-off ~1e-16*|f|/h ~ 1e-9 for |f| ~ 10, so |ad - fd| <= 1e-6 + 1e-5*|fd| leaves two orders
// of magnitude of margin. The f32 forward agrees with f64 within 1e-4 relative (f32 epsilon
// 1.2e-7 times accumulation lengths of at most a few hundred here).
// Kinks (relu, abs, max, pooling, sign) are avoided by drawing inputs at least 0.05 away from
// them and keeping candidate maxima 0.05 apart, far beyond h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>

#include "graph/op_table.h"
#include "meganeura/autodiff.h"
#include "meganeura/session.h"

namespace meganeura {
namespace {

struct Case {
  std::string name;
  Op op;
  // Builds the op mid-graph from parameters the builder creates; returns its output.
  std::function<Tensor(Graph&)> build;
  // Per-parameter value generator: (name, index) -> value; default normal(0,1) from a seed.
  std::function<double(const std::string&, int64_t, std::mt19937&)> value;
  std::map<std::string, std::vector<int32_t>> int_inputs;
  bool zero_grad = false;  // detach: gradient must be exactly zero
};

double away_from_zero(const std::string&, int64_t, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0.05, 1.5);
  return (rng() & 1 ? 1 : -1) * u(rng);
}
double positive(const std::string&, int64_t, std::mt19937& rng) {
  return std::uniform_real_distribution<double>(0.3, 2.0)(rng);
}
// A shuffled grid with spacing 0.05: no ties within 0.05, so max/argmax are stable under h.
double distinct(const std::string& name, int64_t i, std::mt19937&) {
  return std::fmod(double(i) * 0.37, 1.0) * 3 - 1.5 + double(i) * 1e-3 + (name == "b" ? 0.013 : 0);
}

Tensor P(Graph& g, const std::string& name, Shape s) { return g.parameter(name, std::move(s), Init{Init::normal, 1}); }

std::vector<Case> cases() {
  using G = Graph;
  std::vector<Case> c;
  auto un = [&](Op op, std::function<Tensor(Tensor)> f, decltype(Case::value) v = nullptr) {
    c.push_back({std::string(op_name(op)), op, [f](G& g) { return f(P(g, "x", {3, 5})); }, v, {}});
  };
  un(Op::copy, [](Tensor x) { return copy(x); });
  c.push_back({"detach", Op::detach, [](G& g) { return detach(P(g, "x", {4})); }, nullptr, {}, true});
  un(Op::neg, [](Tensor x) { return neg(x); });
  un(Op::exp, [](Tensor x) { return exp(x); });
  un(Op::log, [](Tensor x) { return log(x); }, positive);
  un(Op::sqrt, [](Tensor x) { return sqrt(x); }, positive);
  un(Op::rsqrt, [](Tensor x) { return rsqrt(x); }, positive);
  un(Op::abs, [](Tensor x) { return abs(x); }, away_from_zero);
  un(Op::tanh, [](Tensor x) { return tanh(x); });
  un(Op::sigmoid, [](Tensor x) { return sigmoid(x); });
  un(Op::relu, [](Tensor x) { return relu(x); }, away_from_zero);
  un(Op::gelu_tanh, [](Tensor x) { return gelu(x, true); });
  un(Op::gelu_erf, [](Tensor x) { return gelu(x, false); });
  un(Op::silu, [](Tensor x) { return silu(x); });
  un(Op::affine, [](Tensor x) { return affine(x, -1.7, 0.3); });
  un(Op::cast, [](Tensor x) { return cast(x, DType::f32); });
  un(Op::sign, [](Tensor x) { return sign(x) * x; }, away_from_zero);
  un(Op::positive_mask, [](Tensor x) { return positive_mask(x) * x; }, away_from_zero);
  c.push_back({"clip_coef", Op::clip_coef, [](G& g) {
                 Tensor x = P(g, "x", {});
                 return clip_coef(x * x, 100.0) * x;  // below the threshold: coefficient 1
               }, nullptr, {}});
  auto bin = [&](Op op, std::function<Tensor(Tensor, Tensor)> f, Shape a, Shape b, const char* tag,
                 decltype(Case::value) v = nullptr) {
    c.push_back({std::string(op_name(op)) + tag, op, [=](G& g) { return f(P(g, "a", a), P(g, "b", b)); }, v, {}});
  };
  for (auto [a, b, tag] : {std::tuple{Shape{3, 4}, Shape{3, 4}, ""}, {Shape{2, 3, 4}, Shape{4}, "/bcast_row"},
                           {Shape{3, 1}, Shape{1, 4}, "/bcast_outer"}, {Shape{}, Shape{2, 3}, "/scalar"}}) {
    bin(Op::add, [](Tensor x, Tensor y) { return x + y; }, a, b, tag);
    bin(Op::sub, [](Tensor x, Tensor y) { return x - y; }, a, b, tag);
    bin(Op::mul, [](Tensor x, Tensor y) { return x * y; }, a, b, tag);
    bin(Op::div, [](Tensor x, Tensor y) { return x / y; }, a, b, tag, positive);
  }
  bin(Op::equal, [](Tensor x, Tensor y) { return equal(x, y) * x + y; }, {3, 4}, {3, 4}, "", distinct);
  for (auto [axes, keep, tag] : {std::tuple{std::vector<int64_t>{}, false, "/all"}, {{1}, true, "/axis1_keep"},
                                 {{0, 2}, false, "/axes02"}}) {
    c.push_back({std::string("sum") + tag, Op::sum, [=](G& g) { return sum(P(g, "x", {2, 3, 4}), axes, keep); }, nullptr, {}});
    c.push_back({std::string("mean") + tag, Op::mean, [=](G& g) { return mean(P(g, "x", {2, 3, 4}), axes, keep); }, nullptr, {}});
    c.push_back({std::string("max") + tag, Op::max, [=](G& g) { return max(P(g, "x", {2, 3, 4}), axes, keep); }, distinct, {}});
  }
  for (int64_t axis : {0, 1}) {
    c.push_back({"softmax/axis" + std::to_string(axis), Op::softmax, [=](G& g) { return softmax(P(g, "x", {3, 5}), axis); }, nullptr, {}});
    c.push_back({"log_softmax/axis" + std::to_string(axis), Op::log_softmax, [=](G& g) { return log_softmax(P(g, "x", {3, 5}), axis); }, nullptr, {}});
  }
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::string tag = std::string("/") + (ta ? "T" : "N") + (tb ? "T" : "N");
      c.push_back({"matmul" + tag, Op::matmul, [=](G& g) {
                     return matmul(P(g, "a", ta ? Shape{4, 3} : Shape{3, 4}), P(g, "b", tb ? Shape{5, 4} : Shape{4, 5}), ta, tb);
                   }, nullptr, {}});
      c.push_back({"matmul/batched" + tag, Op::matmul, [=](G& g) {
                     return matmul(P(g, "a", ta ? Shape{2, 4, 3} : Shape{2, 3, 4}), P(g, "b", tb ? Shape{2, 5, 4} : Shape{2, 4, 5}), ta, tb);
                   }, nullptr, {}});
      c.push_back({"matmul/shared_b" + tag, Op::matmul, [=](G& g) {
                     return matmul(P(g, "a", ta ? Shape{2, 4, 3} : Shape{2, 3, 4}), P(g, "b", tb ? Shape{5, 4} : Shape{4, 5}), ta, tb);
                   }, nullptr, {}});
    }
  }
  c.push_back({"matmul/shared_a", Op::matmul, [](G& g) { return matmul(P(g, "a", {3, 4}), P(g, "b", {2, 4, 5})); }, nullptr, {}});
  struct ConvSpec { const char* tag; Shape x, w; Conv2dOptions o; };
  for (const auto& s : {ConvSpec{"/3x3", {2, 3, 5, 5}, {4, 3, 3, 3}, {}},
                        ConvSpec{"/stride2_pad1", {1, 2, 6, 5}, {3, 2, 3, 3}, {2, 2, 1, 1, 1, 1, 1}},
                        ConvSpec{"/dilation2", {1, 2, 7, 7}, {2, 2, 3, 3}, {1, 1, 2, 2, 2, 2, 1}},
                        ConvSpec{"/groups2", {1, 4, 5, 5}, {6, 2, 3, 3}, {1, 1, 1, 1, 1, 1, 2}},
                        ConvSpec{"/depthwise", {1, 3, 4, 4}, {3, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 3}},
                        ConvSpec{"/1x1", {2, 3, 3, 4}, {5, 3, 1, 1}, {}}}) {
    c.push_back({std::string("conv2d") + s.tag, Op::conv2d, [s](G& g) { return conv2d(P(g, "x", s.x), P(g, "w", s.w), s.o); }, nullptr, {}});
  }
  c.push_back({"conv1d/stride2_pad1", Op::conv2d, [](G& g) { return conv1d(P(g, "x", {2, 3, 9}), P(g, "w", {4, 3, 3}), 2, 1); }, nullptr, {}});
  c.push_back({"max_pool2d/3s2p1", Op::max_pool2d, [](G& g) { return max_pool2d(P(g, "x", {1, 2, 6, 6}), 3, 2, 1); }, distinct, {}});
  c.push_back({"max_pool2d/2s2", Op::max_pool2d, [](G& g) { return max_pool2d(P(g, "x", {2, 1, 4, 4}), 2, 2); }, distinct, {}});
  c.push_back({"avg_pool2d/3s2p1", Op::avg_pool2d, [](G& g) { return avg_pool2d(P(g, "x", {1, 2, 6, 6}), 3, 2, 1); }, nullptr, {}});
  c.push_back({"global_avg_pool2d", Op::mean, [](G& g) { return global_avg_pool2d(P(g, "x", {2, 3, 3, 3})); }, nullptr, {}});
  c.push_back({"upsample_nearest2x", Op::upsample_nearest2x, [](G& g) { return upsample_nearest2x(P(g, "x", {1, 2, 3, 2})); }, nullptr, {}});
  c.push_back({"reshape", Op::reshape, [](G& g) { return reshape(P(g, "x", {2, 6}), {3, -1}) * P(g, "y", {3, 4}); }, nullptr, {}});
  c.push_back({"permute", Op::permute, [](G& g) { return permute(P(g, "x", {2, 3, 4}), {2, 0, 1}); }, nullptr, {}});
  c.push_back({"slice", Op::slice, [](G& g) { return slice(P(g, "x", {4, 5}), {1, 0}, {3, 4}); }, nullptr, {}});
  c.push_back({"pad", Op::pad, [](G& g) { return pad(P(g, "x", {2, 3}), {1, 0}, {2, 1}); }, nullptr, {}});
  c.push_back({"concat", Op::concat, [](G& g) { return concat({P(g, "a", {2, 3}), P(g, "b", {2, 1}), P(g, "c", {2, 2})}, 1); }, nullptr, {}});
  c.push_back({"broadcast_to", Op::broadcast_to, [](G& g) { return broadcast_to(P(g, "x", {3, 1}), {2, 3, 4}); }, nullptr, {}});
  c.push_back({"embedding", Op::embedding, [](G& g) { return embedding(P(g, "table", {5, 3}), g.input("ids", {2, 3}, DType::i32)); },
               nullptr, {{"ids", {4, 0, 2, 2, 1, 4}}}});
  c.push_back({"embedding_backward", Op::embedding_backward,
               [](G& g) { return embedding_backward(P(g, "dy", {4, 3}), g.input("ids", {4}, DType::i32), 6); },
               nullptr, {{"ids", {5, 0, 5, 2}}}});
  c.push_back({"one_hot", Op::one_hot, [](G& g) { return one_hot(g.input("ids", {4}, DType::i32), 3, -1) * P(g, "x", {4, 3}); },
               nullptr, {{"ids", {2, -1, 0, 1}}}});
  c.push_back({"rope", Op::rope, [](G& g) { return rope(P(g, "x", {2, 5, 6}), 100.0); }, nullptr, {}});
  c.push_back({"rope/inverse", Op::rope, [](G& g) { return rope(P(g, "x", {1, 2, 4, 4}), 10000.0, true); }, nullptr, {}});
  c.push_back({"causal_mask", Op::causal_mask, [](G& g) { return causal_mask(P(g, "x", {2, 3, 5}), 0.5); }, nullptr, {}});
  c.push_back({"lr_schedule", Op::lr_schedule, [](G& g) {
                 Tensor s = P(g, "s", {});
                 return lr_schedule(s, ScheduleAttrs{0.1, 0, 0, 0}) * s;
               }, nullptr, {}});
  c.push_back({"bias_correction", Op::bias_correction, [](G& g) {
                 return bias_correction(g.input("n", {}, DType::i32), 0.99, -0.5) * P(g, "x", {3});
               }, nullptr, {{"n", {6}}}});
  c.push_back({"increment", Op::increment, [](G& g) {
                 return cast(increment(g.input("n", {}, DType::i32)), DType::f32) * P(g, "x", {});
               }, nullptr, {{"n", {41}}}});
  // Compositions used by the workloads.
  c.push_back({"layer_norm", Op::rsqrt, [](G& g) { return layer_norm(P(g, "x", {3, 6}), P(g, "g", {6}), P(g, "b", {6})); }, nullptr, {}});
  c.push_back({"rms_norm", Op::rsqrt, [](G& g) { return rms_norm(P(g, "x", {3, 6}), P(g, "g", {6})); }, nullptr, {}});
  c.push_back({"group_norm", Op::rsqrt, [](G& g) { return group_norm(P(g, "x", {2, 4, 3, 3}), 2, P(g, "g", {4}), P(g, "b", {4})); }, nullptr, {}});
  c.push_back({"swiglu", Op::silu, [](G& g) { return swiglu(P(g, "a", {3, 4}), P(g, "b", {3, 4})); }, nullptr, {}});
  c.push_back({"attention/causal_gqa", Op::softmax, [](G& g) {
                 return attention(P(g, "q", {1, 4, 3, 4}), P(g, "k", {1, 2, 3, 4}), P(g, "v", {1, 2, 3, 4}), true);
               }, nullptr, {}});
  c.push_back({"attention/cross", Op::softmax, [](G& g) {
                 return attention(P(g, "q", {2, 2, 3, 4}), P(g, "k", {2, 2, 5, 4}), P(g, "v", {2, 2, 5, 3}), false);
               }, nullptr, {}});
  c.push_back({"cross_entropy/ignore", Op::softmax_cross_entropy, [](G& g) {
                 return cross_entropy(P(g, "logits", {4, 5}), g.input("t", {4}, DType::i32), -100);
               }, nullptr, {{"t", {3, -100, 0, 4}}}});
  c.push_back({"cross_entropy/all_ignored_but_one", Op::softmax_cross_entropy, [](G& g) {
                 return softmax_cross_entropy(P(g, "logits", {3, 4}), g.input("t", {3}, DType::i32), 1);
               }, nullptr, {{"t", {1, 2, 1}}}});
  // Ops the workloads added.
  un(Op::sin, [](Tensor x) { return sin(x); });
  un(Op::cos, [](Tensor x) { return cos(x); });
  bin(Op::maximum, [](Tensor x, Tensor y) { return maximum(x, y); }, {3, 4}, {3, 4}, "", distinct);
  bin(Op::maximum, [](Tensor x, Tensor y) { return maximum(x, y); }, {2, 3, 4}, {4}, "/bcast_row", distinct);
  bin(Op::less, [](Tensor x, Tensor y) { return less(x, y) * x + y; }, {3, 4}, {3, 4}, "", distinct);
  c.push_back({"where", Op::where, [](G& g) {
                 Tensor a = P(g, "a", {3, 4}), b = P(g, "b", {3, 4});
                 return where(less(a, b), a * b, exp(b));
               }, distinct, {}});
  c.push_back({"where/bcast", Op::where, [](G& g) {
                 Tensor c0 = P(g, "c", {3, 1}), a = P(g, "a", {3, 4}), b = P(g, "b", {});
                 return where(positive_mask(c0), a, b);
               }, away_from_zero, {}});
  c.push_back({"gather/axis1", Op::gather, [](G& g) { return gather(P(g, "x", {3, 5, 2}), 1, g.input("i", {4}, DType::i32)); },
               nullptr, {{"i", {4, 0, 4, 2}}}});
  c.push_back({"gather/axis0", Op::gather, [](G& g) { return gather(P(g, "x", {4, 3}), 0, g.input("i", {2}, DType::i32)); },
               nullptr, {{"i", {3, 1}}}});
  c.push_back({"gather_backward", Op::gather_backward,
               [](G& g) { return gather_backward(P(g, "dy", {2, 3}), g.input("i", {3}, DType::i32), 1, 5); },
               nullptr, {{"i", {1, 1, 4}}}});
  c.push_back({"batch_norm/train", Op::rsqrt, [](G& g) {
                 Tensor rm = g.state("rm", {3}), rv = g.state("rv", {3}, Init{Init::ones});
                 return batch_norm_train(P(g, "x", {2, 3, 2, 2}), P(g, "g", {3}), P(g, "b", {3}), rm, rv);
               }, nullptr, {}});
  c.push_back({"batch_norm/inference", Op::rsqrt, [](G& g) {
                 return batch_norm_inference(P(g, "x", {2, 3, 2}), P(g, "g", {3}), P(g, "b", {3}), P(g, "m", {3}),
                                             P(g, "v", {3}));
               }, [](const std::string& name, int64_t i, std::mt19937& rng) {
                 return name == "v" ? positive(name, i, rng) : std::normal_distribution<double>(0, 1)(rng);
               }, {}});
  c.push_back({"timestep_embedding", Op::sin, [](G& g) { return timestep_embedding(P(g, "t", {3}), 8, 100.0); }, nullptr, {}});
  c.push_back({"attention_fused/causal_gqa", Op::attention_fused, [](G& g) {
                 // Both parts of the packed output (out and lse) feed the loss.
                 return attention_fused_packed(P(g, "q", {1, 4, 5, 3}), P(g, "k", {1, 2, 7, 3}), P(g, "v", {1, 2, 7, 2}), true, 0.6);
               }, nullptr, {}});
  c.push_back({"attention_fused/cross", Op::attention_fused, [](G& g) {
                 return attention_fused_packed(P(g, "q", {2, 2, 3, 4}), P(g, "k", {2, 2, 4, 4}), P(g, "v", {2, 2, 4, 3}), false, 0.5);
               }, nullptr, {}});
  c.push_back({"mse", Op::mean, [](G& g) { return mse(P(g, "p", {3, 4}), P(g, "t", {3, 4})); }, nullptr, {}});
  return c;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

struct Result {
  double max_err = 0;
  size_t checked = 0;
};

// Builds the case with a weighted-sum head, and returns the graph plus parameter names.
Result check(const Case& k) {
  Graph g;
  Tensor y = k.build(g);
  std::mt19937 wrng(7);
  std::vector<double> w(size_t(y.type().numel()));
  for (auto& v : w) v = std::uniform_real_distribution<double>(0.5, 1.5)(wrng) * (wrng() & 1 ? 1 : -1);
  Tensor loss = sum(y * g.constant(w, y.shape()));
  g.output("loss", loss);
  g.output("out", y);
  std::vector<Tensor> params;
  for (NodeId id : g.parameters()) params.push_back(g.tensor(id));
  auto grads = grad(loss, params);
  for (size_t i = 0; i < params.size(); ++i) g.output("grad." + g.node(params[i].id).name, grads[i]);

  Session oracle(SessionOptions{Device::cpu, true, 1, 0});
  Session strict(SessionOptions{Device::cpu, false, 1, 0});
  oracle.add(g);
  strict.add(g);
  std::mt19937 rng(11);
  std::map<std::string, std::vector<double>> values;
  for (const Tensor& p : params) {
    const std::string& name = g.node(p.id).name;
    std::vector<double> v(size_t(p.type().numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = k.value ? k.value(name, int64_t(i), rng) : std::normal_distribution<double>(0, 1)(rng);
    }
    values[name] = v;
    oracle.set(name, std::span<const double>(v));
    strict.set(name, std::span<const double>(v));
  }
  for (auto& [name, ids] : k.int_inputs) {
    oracle.set(name, std::span<const int32_t>(ids));
    strict.set(name, std::span<const int32_t>(ids));
  }
  oracle.run();
  strict.run();
  Result r;
  auto y64 = oracle.get_f64("out");
  auto y32 = strict.get_f64("out");
  for (size_t i = 0; i < y64.size(); ++i) {
    EXPECT_NEAR(y32[i], y64[i], 1e-4 * (1 + std::abs(y64[i]))) << k.name << ": f32 forward differs at " << i;
  }
  const double h = 1e-6;
  for (const Tensor& p : params) {
    const std::string& name = g.node(p.id).name;
    oracle.run();
    auto ad = oracle.get_f64("grad." + name);
    auto v = values[name];
    for (size_t i = 0; i < v.size(); ++i) {
      double fd = 0;
      if (!k.zero_grad) {
        auto at = [&](double x) {
          v[i] = x;
          oracle.set(name, std::span<const double>(v));
          oracle.run();
          return oracle.get_f64("loss")[0];
        };
        const double x0 = values[name][i];
        fd = (at(x0 + h) - at(x0 - h)) / (2 * h);
        v[i] = x0;
        oracle.set(name, std::span<const double>(v));
      }
      double err = std::abs(ad[i] - fd);
      r.max_err = std::max(r.max_err, err / (1 + std::abs(fd)));
      EXPECT_LE(err, 1e-6 + 1e-5 * std::abs(fd)) << k.name << ": d loss / d " << name << "[" << i << "] autodiff " << ad[i] << " vs finite difference " << fd;
      r.checked++;
    }
  }
  return r;
}

class GradCheck : public testing::TestWithParam<Case> {};

TEST_P(GradCheck, MatchesFiniteDifferences) {
  Result r = check(GetParam());
  EXPECT_GT(r.checked, 0u);
}

INSTANTIATE_TEST_SUITE_P(Ops, GradCheck, testing::ValuesIn(cases()), [](const testing::TestParamInfo<Case>& i) {
  std::string n = i.param.name;
  for (char& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

// Every op of the table has a check: directly, or (backward-only ops) through its forward op.
TEST(GradCheck, EveryOpIsCovered) {
  std::map<Op, int> covered;
  for (const Case& k : cases()) covered[k.op]++;
  std::printf("%-24s %-14s %s\n", "op", "gradient", "check");
  int missing = 0;
  for (const OpInfo& info : op_table()) {
    std::string status;
    switch (info.grad) {
      case GradKind::leaf: status = "leaf (no check needed)"; break;
      case GradKind::fused: status = "created after autodiff: core_passes_test"; break;
      case GradKind::backward_only:
        status = covered.count(info.checked_by) ? "via " + std::string(op_name(info.checked_by)) : "MISSING";
        break;
      default:
        status = covered.count(info.op) ? std::to_string(covered[info.op]) + " case(s)" : "MISSING";
    }
    const char* kind = info.grad == GradKind::vjp ? "vjp" : info.grad == GradKind::none ? "zero" :
                       info.grad == GradKind::leaf ? "leaf" : info.grad == GradKind::fused ? "fused" : "backward-only";
    std::printf("%-24s %-14s %s\n", std::string(info.name).c_str(), kind, status.c_str());
    if (status == "MISSING") {
      ++missing;
      ADD_FAILURE() << "op " << info.name << " has no gradient check";
    }
  }
  EXPECT_EQ(missing, 0);
}

}  // namespace
}  // namespace meganeura
