// Forward semantics of the ops the workloads added, against naive f64 loops written here,
// plus structural checks (grouped-query attention copies no K/V; the fused cross-entropy's
// backward is one [N, C] dispatch). Tolerance: f32 within 2e-5 * (1 + |ref|) of f64; the
// longest reduction here is 24 terms, so f32 rounding stays below 1e-6 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "forward_harness.h"
#include "graph/internal.h"
#include "graph/op_table.h"
#include "meganeura/autodiff.h"
#include "meganeura/session.h"

namespace meganeura {
namespace {

using forward_test::expect_close;
using forward_test::Vec;

struct Harness : forward_test::Inputs {
  Harness() : Inputs(17, 3) {}
  std::unique_ptr<Session> s;
  void run() {
    s = std::make_unique<Session>();
    s->add(g);
    feed(*s);
    s->run();
  }
  Vec get(const std::string& name) { return s->get_f64(name); }
};

TEST(WorkloadOps, TrigMaximumLessWhere) {
  Harness h;
  Tensor a = h.in("a", {3, 4}), b = h.in("b", {4});
  h.g.output("sin", sin(a));
  h.g.output("cos", cos(a));
  h.g.output("max", maximum(a, b));
  h.g.output("less", less(a, b));
  h.g.output("where", where(less(a, b), a, b * 2.0));
  h.run();
  const Vec &A = h.values["a"], &B = h.values["b"];
  Vec s, c, m, l, w;
  for (size_t i = 0; i < 12; ++i) {
    double x = A[i], y = B[i % 4];
    s.push_back(std::sin(x));
    c.push_back(std::cos(x));
    m.push_back(x > y ? x : y);
    l.push_back(x < y ? 1 : 0);
    w.push_back(x < y ? x : 2 * y);
  }
  expect_close(h.get("sin"), s, "sin");
  expect_close(h.get("cos"), c, "cos");
  expect_close(h.get("max"), m, "maximum");
  expect_close(h.get("less"), l, "less");
  expect_close(h.get("where"), w, "where");
}

TEST(WorkloadOps, GatherAndScatterAlongAnAxis) {
  Harness h;
  Tensor x = h.in("x", {2, 5, 3});
  Tensor i = h.ids("i", {4, 0, 4});
  h.g.output("y", gather(x, 1, i));
  Tensor dy = h.in("dy", {2, 3, 3});
  h.g.output("dx", gather_backward(dy, i, 1, 5));
  h.run();
  const Vec &X = h.values["x"], &DY = h.values["dy"];
  const int idx[3] = {4, 0, 4};
  Vec y, dx(30, 0.0);
  for (int o = 0; o < 2; ++o)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) {
        y.push_back(X[size_t((o * 5 + idx[j]) * 3 + k)]);
        dx[size_t((o * 5 + idx[j]) * 3 + k)] += DY[size_t((o * 3 + j) * 3 + k)];
      }
  expect_close(h.get("y"), y, "gather");
  expect_close(h.get("dx"), dx, "gather_backward");
}

TEST(WorkloadOps, GatherRejectsOutOfRangeIndices) {
  Harness h;
  Tensor x = h.in("x", {2, 3});
  h.g.output("y", gather(x, 1, h.ids("i", {0, 3})));
  try {
    h.run();
    FAIL() << "an index past the axis must be rejected";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("[cpu:gather] index 3 at position 1 out of range"), std::string::npos)
        << e.what();
  }
}

TEST(WorkloadOps, FusedCrossEntropyAndItsBackward) {
  Harness h;
  Tensor logits = h.in("l", {4, 6});
  Tensor t = h.ids("t", {2, -100, 5, 0});
  Tensor loss = softmax_cross_entropy(logits, t);
  h.g.output("loss", loss);
  h.g.output("grad", grad(loss * 3.0, {logits})[0]);  // upstream gradient 3
  h.run();
  const Vec& L = h.values["l"];
  const int tg[4] = {2, -100, 5, 0};
  double total = 0;
  Vec gw(24, 0.0);
  for (int r = 0; r < 4; ++r) {
    if (tg[r] < 0) continue;
    double z = 0;
    for (int c = 0; c < 6; ++c) z += std::exp(L[size_t(r * 6 + c)]);
    total += std::log(z) - L[size_t(r * 6 + tg[r])];
    for (int c = 0; c < 6; ++c)
      gw[size_t(r * 6 + c)] = 3.0 / 3.0 * (std::exp(L[size_t(r * 6 + c)]) / z - (c == tg[r] ? 1 : 0));
  }
  expect_close(h.get("loss"), {total / 3}, "softmax_cross_entropy");
  expect_close(h.get("grad"), gw, "softmax_cross_entropy_backward");
  // The backward is one dispatch writing one [N, C] tensor: no one-hot, no log-softmax.
  for (size_t k = 0; k < h.g.size(); ++k) {
    Op op = h.g.node(NodeId(k)).op;
    EXPECT_NE(op, Op::one_hot);
    EXPECT_NE(op, Op::log_softmax);
  }
}

TEST(WorkloadOps, BatchNormTrainingUpdatesRunningAverages) {
  Harness h;
  const int N = 3, C = 2, L = 4;
  Tensor x = h.in("x", {N, C, L}), gm = h.in("gm", {C}), bt = h.in("bt", {C});
  Tensor rm = h.g.state("rm", {C}), rv = h.g.state("rv", {C}, Init{Init::ones});
  h.g.output("y", batch_norm_train(x, gm, bt, rm, rv, 0.1, 1e-5));
  h.run();
  const Vec &X = h.values["x"], &G = h.values["gm"], &B = h.values["bt"];
  Vec y(size_t(N * C * L)), want_rm, want_rv;
  for (int c = 0; c < C; ++c) {
    double m = 0, v = 0;
    for (int n = 0; n < N; ++n)
      for (int l = 0; l < L; ++l) m += X[size_t((n * C + c) * L + l)];
    m /= N * L;
    for (int n = 0; n < N; ++n)
      for (int l = 0; l < L; ++l) v += std::pow(X[size_t((n * C + c) * L + l)] - m, 2);
    const double var = v / (N * L);
    for (int n = 0; n < N; ++n)
      for (int l = 0; l < L; ++l) {
        size_t i = size_t((n * C + c) * L + l);
        y[i] = (X[i] - m) / std::sqrt(var + 1e-5) * G[size_t(c)] + B[size_t(c)];
      }
    want_rm.push_back(0.1 * m);
    want_rv.push_back(0.9 + 0.1 * v / (N * L - 1));
  }
  expect_close(h.get("y"), y, "batch_norm train");
  expect_close(h.get("rm"), want_rm, "running mean");
  expect_close(h.get("rv"), want_rv, "running var");
}

TEST(WorkloadOps, BatchNormInferenceIsFoldedScaleAndShift) {
  Harness h;
  Tensor x = h.in("x", {2, 3, 2, 2}), gm = h.in("gm", {3}), bt = h.in("bt", {3}), m = h.in("m", {3});
  Tensor v = h.g.input("v", {3});
  h.values["v"] = {0.5, 1.5, 2.5};
  h.g.output("y", batch_norm_inference(x, gm, bt, m, v, 1e-3));
  h.run();
  const Vec &X = h.values["x"], &G = h.values["gm"], &B = h.values["bt"], &M = h.values["m"], &V = h.values["v"];
  Vec y(X.size());
  for (size_t i = 0; i < X.size(); ++i) {
    size_t c = (i / 4) % 3;
    y[i] = (X[i] - M[c]) / std::sqrt(V[c] + 1e-3) * G[c] + B[c];
  }
  expect_close(h.get("y"), y, "batch_norm inference");
  // Folded: the [N, C, H, W] tensor sees exactly one multiply and one add.
  int big = 0;
  for (size_t k = 0; k < h.g.size(); ++k) {
    const Node& n = h.g.node(NodeId(k));
    if (op_info(n.op).family == OpFamily::binary && n.type.shape == x.shape()) ++big;
  }
  EXPECT_EQ(big, 2);
}

TEST(WorkloadOps, ArangeAndTimestepEmbedding) {
  Harness h;
  h.g.output("r", arange(h.g, 4, 1.5, -0.5));
  Tensor t = h.in("t", {2});
  h.g.output("e", timestep_embedding(t, 6, 100.0));
  h.run();
  expect_close(h.get("r"), {1.5, 1.0, 0.5, 0.0}, "arange");
  Vec e;
  for (int n = 0; n < 2; ++n) {
    double tv = h.values["t"][size_t(n)];
    for (int i = 0; i < 3; ++i) e.push_back(std::cos(tv * std::pow(100.0, -i / 3.0)));
    for (int i = 0; i < 3; ++i) e.push_back(std::sin(tv * std::pow(100.0, -i / 3.0)));
  }
  expect_close(h.get("e"), e, "timestep_embedding");
  EXPECT_THROW(arange(h.g, -1), std::invalid_argument);
}

// Grouped-query attention shares each key/value head across its query group without copies:
// the training graph broadcasts nothing but the loss's scalar seed, and moves no data.
TEST(WorkloadOps, GroupedQueryAttentionCopiesNoKeysOrValues) {
  Graph g;
  Tensor q = g.parameter("q", {1, 6, 5, 4}, Init{Init::normal, 1});
  Tensor k = g.parameter("k", {1, 2, 5, 4}, Init{Init::normal, 1});
  Tensor v = g.parameter("v", {1, 2, 5, 4}, Init{Init::normal, 1});
  Tensor loss = sum(attention(q, k, v, true));
  grad(loss, {q, k, v});
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(NodeId(i));
    // The only broadcast is the loss's seed (a scalar spread over the output of sum).
    if (n.op == Op::broadcast_to) {
      EXPECT_EQ(g.node(n.inputs[0]).type.numel(), 1) << "node " << i;
    }
    if (n.op == Op::permute || n.op == Op::concat || n.op == Op::copy) {
      ADD_FAILURE() << "unexpected data movement " << op_name(n.op) << " at node " << i;
    }
  }
}

// Whisper-length attention (1,500 tokens) in training: no tensor of the graph, forward or
// backward, holds a score matrix (Sq x Sk) of even one head.
TEST(WorkloadOps, LongAttentionMaterialisesNoScoreMatrix) {
  Graph g;
  const int64_t s = 1500;
  Tensor q = g.parameter("q", {1, 6, s, 64}, Init{Init::normal, 1});
  Tensor k = g.parameter("k", {1, 6, s, 64}, Init{Init::normal, 1});
  Tensor v = g.parameter("v", {1, 6, s, 64}, Init{Init::normal, 1});
  Tensor loss = sum(attention(q, k, v, false));
  grad(loss, {q, k, v});
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_LT(g.node(NodeId(i)).type.numel(), s * s) << op_name(g.node(NodeId(i)).op) << " at node " << i;
  }
}

}  // namespace
}  // namespace meganeura
