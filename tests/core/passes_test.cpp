// Rewrite passes and the schedule: every pass, alone and all together, must leave every output
// and every assigned state equal to the unrewritten graph's, run on the CPU backend in the f64
// oracle and in f32. Both programs start from the same seed and inputs and take two steps, so
// optimizer state updates (assignments written in place) are compared too.
#include "meganeura/passes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "graph/internal.h"
#include "graph/op_table.h"
#include "meganeura/models.h"
#include "meganeura/train.h"
#include "passes/registry.h"
#include "schedule/schedule.h"

namespace meganeura {
namespace {

using Pass = std::function<Graph(const Graph&, PassStats*)>;

struct NamedPass {
  std::string name;
  Pass run;
};

std::vector<NamedPass> passes() {
  return {
      {"dead_nodes", [](const Graph& g, PassStats* s) { return remove_dead_nodes(g, s); }},
      {"softmax", [](const Graph& g, PassStats* s) { return fuse_softmax(g, s); }},
      {"norms", [](const Graph& g, PassStats* s) { return fuse_norms(g, s); }},
      {"batched_matmul_sums", [](const Graph& g, PassStats* s) { return fold_batched_matmul_sums(g, s); }},
      {"pointwise", [](const Graph& g, PassStats* s) { return fuse_pointwise(g, {.matmul_epilogue = false}, s); }},
      {"pointwise+epilogue", [](const Graph& g, PassStats* s) { return fuse_pointwise(g, {}, s); }},
      {"pointwise+epilogue, one output each",
       [](const Graph& g, PassStats* s) { return fuse_pointwise(g, {.multi_output = false}, s); }},
      {"all", [](const Graph& g, PassStats* s) { return optimize(g, {}, s); }},
  };
}

// Deterministic inputs: floats in [-1.5, 1.5], integer inputs as valid class/token ids.
void feed(Session& s, const Graph& g, int step, int64_t id_range) {
  for (NodeId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.op != Op::input || !s.buffers().count(n.name)) continue;
    const int64_t count = n.type.numel();
    if (n.type.dtype == DType::i32) {
      std::vector<int32_t> v(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) v[size_t(i)] = int32_t((i * 7 + step * 3) % id_range);
      s.set(n.name, std::span<const int32_t>(v));
    } else {
      std::vector<double> v(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) v[size_t(i)] = 1.5 * std::sin(0.37 * double(i) + double(step));
      s.set(n.name, std::span<const double>(v));
    }
  }
}

// Runs `g` as planned (no passes) and `rewritten` side by side; compares outputs and states.
void expect_same(const Graph& g, const Graph& rewritten, bool f64, int64_t id_range, const std::string& what) {
  SessionOptions so;
  so.f64_oracle = f64;
  so.seed = 7;
  PlanOptions po;
  po.float_dtype = f64 ? DType::f64 : DType::f32;
  Session a(so), b(so);
  a.add(plan(g, po));
  b.add(plan(rewritten, po));
  // f64: the fused kernels evaluate the same operations in the same order, so only the
  // reductions' and BLAS's summation order may differ: 1e-10 relative is far above that
  // and far below any real error. f32: a few ulps (1e-7) amplified through two steps of
  // training (Adam divides by sqrt(v)): 2e-4 relative plus 2e-5 absolute.
  const double rtol = f64 ? 1e-10 : 2e-4, atol = f64 ? 1e-12 : 2e-5;
  int compared = 0;
  for (int step = 0; step < 2; ++step) {
    feed(a, g, step, id_range);
    feed(b, g, step, id_range);
    a.run();
    b.run();
    for (auto& [name, buf] : a.buffers()) {
      if (buf.role != Role::output && buf.role != Role::state && buf.role != Role::parameter) continue;
      ASSERT_TRUE(b.buffers().count(name)) << what << ": rewritten program lacks '" << name << "'";
      auto x = a.get_f64(name), y = b.get_f64(name);
      ASSERT_EQ(x.size(), y.size()) << what << ": " << name;
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_NEAR(y[i], x[i], atol + rtol * std::abs(x[i]))
            << what << (f64 ? " f64" : " f32") << ": " << name << "[" << i << "] at step " << step;
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 0) << what;
}

struct Case {
  std::string name;
  std::function<Graph()> build;
  int64_t id_range = 2;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

models::CharGptConfig tiny_gpt() {
  models::CharGptConfig c;
  c.vocab = 11;
  c.dim = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = 2;
  c.ffn = 24;
  c.seq = 8;
  return c;
}

OptimizerConfig adamw_clip() {
  OptimizerConfig o;
  o.kind = OptimizerConfig::Kind::adamw;
  o.lr = 1e-2;
  o.weight_decay = 0.01;
  o.clip_norm = 1.0;
  o.warmup_steps = 1;
  o.total_steps = 10;
  return o;
}

// A small MLP's training step with optimizer `o`.
Graph mlp_step(const OptimizerConfig& o) {
  return training_graph(
      [](Graph& g) {
        models::MlpConfig c{6, 12, 3, 2};
        return cross_entropy(models::mlp(g, g.input("x", {5, 6}), c), g.input("labels", {5}, DType::i32));
      },
      o);
}

std::vector<Case> cases() {
  return {
      {"chargpt_training_step",
       [] {
         return training_graph(
             [](Graph& g) {
               auto c = tiny_gpt();
               Tensor ids = g.input("ids", {2, c.seq}, DType::i32);
               Tensor targets = g.input("targets", {2 * c.seq}, DType::i32);
               return cross_entropy(reshape(models::chargpt(g, ids, c), {2 * c.seq, c.vocab}), targets);
             },
             adamw_clip());
       },
       11},
      {"mlp_training_step_sgd",
       [] {
         OptimizerConfig o;
         o.kind = OptimizerConfig::Kind::sgd;
         o.lr = 0.1;
         o.momentum = 0.9;
         o.weight_decay = 1e-3;
         return mlp_step(o);
       },
       3},
      {"mlp_training_step_adam_l2",
       [] {
         OptimizerConfig o;
         o.kind = OptimizerConfig::Kind::adam;
         o.lr = 0.05;
         o.weight_decay = 1e-2;  // added to the gradient: read by both moments
         return mlp_step(o);
       },
       3},
      {"mlp_training_step_sgd_nesterov",
       [] {
         OptimizerConfig o;
         o.kind = OptimizerConfig::Kind::sgd;
         o.lr = 0.1;
         o.momentum = 0.8;
         o.nesterov = true;
         return mlp_step(o);
       },
       3},
      {"state_update_with_old_value_kept",
       [] {
         // s1's new value cannot overwrite s1 during the step (s3 takes the old one): the
         // multi-output program writes it to a temporary, copied at the end of the step
         Graph g;
         Tensor x = g.input("x", {4, 8});
         Tensor s1 = g.state("s1", {4, 8}, Init{Init::normal, 1});
         Tensor s2 = g.state("s2", {4, 8}, Init{Init::normal, 1});
         Tensor a = s1 * 0.9 + x;
         g.assign(s1, a);
         g.assign(s2, s2 * 0.5 + a * a);
         g.assign(g.state("s3", {4, 8}), s1);
         g.output("mean", mean(x * x));
         return g;
       }},
      {"layer_and_group_norm_inference",
       [] {
         Graph g;
         Tensor x = g.input("x", {2, 4, 3, 5});
         Tensor gamma = g.parameter("gamma", {5}, Init{Init::normal, 1});
         Tensor beta = g.parameter("beta", {5}, Init{Init::normal, 1});
         Tensor cg = g.parameter("cg", {4}, Init{Init::normal, 1});
         Tensor cb = g.parameter("cb", {4}, Init{Init::normal, 1});
         g.output("ln", layer_norm(x, gamma, beta, 1e-3));
         g.output("gn", group_norm(x, 2, cg, cb, 1e-4));
         g.output("rms", rms_norm(tanh(x), gamma));
         return g;
       }},
      {"attention_and_epilogues_inference",
       [] {
         Graph g;
         Tensor q = g.input("q", {1, 2, 6, 4}), k = g.input("k", {1, 2, 6, 4}), v = g.input("v", {1, 2, 6, 4});
         Tensor w = g.parameter("w", {4, 4}, Init{Init::normal, 0.5});
         Tensor bias = g.parameter("bias", {4}, Init{Init::normal, 0.5});
         Tensor a = attention(q, k, v, true);
         g.output("y", gelu(matmul(a, w) + bias, true) + a);  // bias, activation, residual
         g.output("noncausal", attention(q, k, v, false, 0.3));
         Tensor unused = exp(q);  // dead: no output needs it
         (void)unused;
         return g;
       }},
  };
}

class PassEquivalence : public testing::TestWithParam<Case> {};

TEST_P(PassEquivalence, EveryPassKeepsOutputsAndStates) {
  const Case& c = GetParam();
  Graph g = c.build();
  for (const NamedPass& p : passes()) {
    PassStats st;
    Graph r = p.run(g, &st);
    for (bool f64 : {true, false}) expect_same(g, r, f64, c.id_range, c.name + " / " + p.name);
  }
}

INSTANTIATE_TEST_SUITE_P(Graphs, PassEquivalence, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case>& i) { return i.param.name; });

// The patterns fire where they should: otherwise the equivalence above compares a graph with itself.
TEST(Passes, PatternsFire) {
  auto all = cases();
  PassStats gpt, norms, attn;
  Graph step = optimize(all[0].build(), {}, &gpt);
  EXPECT_GT(gpt.fused, 0u);
  EXPECT_GT(gpt.inlined, 100u);
  EXPECT_GT(gpt.epilogues, 0u);
  EXPECT_EQ(gpt.folded, 15u);    // each weight matrix's gradient: 7 per layer and the tied output projection
  EXPECT_EQ(gpt.softmaxes, 2u);  // one per layer: the backward keeps the probabilities only
  // AdamW: the new moments become outputs 1 and 2 of the new parameter's program
  EXPECT_EQ(gpt.multi_outputs, 2 * all[0].build().parameters().size());
  for (size_t c : {1, 2, 3, 4}) {
    PassStats optim;
    Graph g = all[c].build();
    optimize(g, {}, &optim);
    // Adam: two moments per parameter; SGD: one momentum buffer; the state update: one
    const size_t want = c == 2 ? 2 * g.parameters().size() : c == 4 ? 1 : g.parameters().size();
    EXPECT_EQ(optim.multi_outputs, want) << all[c].name;
  }
  optimize(all[5].build(), {}, &norms);
  EXPECT_EQ(norms.norms, 3u);  // layer norm, group norm (its inner layer norm), rms norm
  optimize(all[6].build(), {}, &attn);
  EXPECT_EQ(attn.softmaxes, 2u);
  EXPECT_EQ(attn.epilogues, 1u);
  EXPECT_GT(attn.removed, 0u);
  size_t fused_ops = 0;
  for (NodeId id = 0; id < step.size(); ++id) fused_ops += op_info(step.node(id).op).family == OpFamily::fused;
  EXPECT_GT(fused_ops, 0u);
}

// ---- The registry: the pipeline's order, and each registered pass alone on a graph where it
// fires, compared with the unrewritten graph.
TEST(PassRegistry, PipelineOrder) {
  std::vector<std::string> names;
  for (const passes::Pass& p : passes::pipeline()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"decompose", "prune", "softmax", "norms", "batched_matmul_sums",
                                             "pointwise", "dead_nodes"}));
  ASSERT_NE(passes::find_pass("norms"), nullptr);
  EXPECT_STREQ(passes::find_pass("norms")->name, "norms");
  EXPECT_EQ(passes::find_pass("no_such_pass"), nullptr);
}

// Switching a pass off in PassOptions leaves its rewrite out of optimize() and nothing else.
TEST(PassRegistry, OptionsSwitchPassesOff) {
  const Graph g = cases()[0].build();  // chargpt's step: every counted pass fires
  PassStats all;
  optimize(g, {}, &all);
  int checked = 0;
  for (const passes::Pass& p : passes::pipeline()) {
    if (!p.enabled || !p.counter || all.*p.counter == 0) continue;
    PassOptions o;
    o.*p.enabled = false;
    PassStats st;
    optimize(g, o, &st);
    EXPECT_EQ(st.*p.counter, 0u) << p.name << " ran while switched off";
    ++checked;
  }
  EXPECT_GE(checked, 4);  // softmax, batched matmul sums, pointwise, dead nodes at least
}

struct PassCase {
  std::string pass;
  std::function<Graph()> build;
  int64_t id_range = 3;
};
void PrintTo(const PassCase& c, std::ostream* os) { *os << c.pass; }

// One graph per registered pass on which that pass has something to do.
std::vector<PassCase> pass_cases() {
  auto with_dead_node = [] {
    Graph g;
    Tensor x = g.input("x", {3, 4});
    Tensor unused = exp(x) * 2.0;
    (void)unused;
    g.output("y", relu(x) + 1.0);
    return g;
  };
  auto cross_entropy_where = [] {
    Graph g;
    Tensor x = g.input("x", {5, 3});
    Tensor w = g.parameter("w", {3, 3}, Init{Init::normal, 0.5});
    Tensor logits = matmul(x, w);
    g.output("loss", cross_entropy(logits, g.input("labels", {5}, DType::i32)));
    g.output("w2", where(less(x, g.scalar(0.0)), x, exp(x)));
    return g;
  };
  return {
      {"decompose", cross_entropy_where},
      {"prune", with_dead_node},
      {"softmax", cases()[6].build},
      {"norms", cases()[5].build},
      {"batched_matmul_sums", cases()[0].build, 11},
      {"pointwise", cases()[2].build},
      {"dead_nodes", with_dead_node},
  };
}

class EachPass : public testing::TestWithParam<PassCase> {};

TEST_P(EachPass, RewritesAndKeepsValues) {
  const PassCase& c = GetParam();
  const passes::Pass* p = passes::find_pass(c.pass);
  ASSERT_NE(p, nullptr) << c.pass;
  const Graph g = c.build();
  PassStats st;
  const Graph r = p->run(g, PassOptions{}, &st);
  if (p->counter) {
    EXPECT_GT(st.*p->counter, 0u) << c.pass << " found nothing to rewrite";
  }
  if (c.pass == "decompose") {
    for (NodeId id = 0; id < r.size(); ++id) {
      const Op op = r.node(id).op;
      EXPECT_TRUE(op != Op::softmax_cross_entropy && op != Op::where) << op_name(op) << " left";
    }
  }
  if (c.pass == "prune") {
    EXPECT_LT(r.size(), g.size());
  }
  for (bool f64 : {true, false}) expect_same(g, r, f64, c.id_range, c.pass);
}

INSTANTIATE_TEST_SUITE_P(Pipeline, EachPass, testing::ValuesIn(pass_cases()),
                         [](const testing::TestParamInfo<PassCase>& i) { return i.param.pass; });

// A value read by several consumers is recomputed in each only where that reads no more
// full-size tensors than writing it once and reading it back would: with k consumers and L
// tensors of its size read, where k * L <= L + 1 + k.
TEST(Passes, RecomputeOnlyWhereItReadsLess) {
  for (int big : {1, 2, 5}) {
    Graph g;
    const Shape sh{8, 16};
    Tensor v = g.input("x0", sh);
    for (int i = 1; i < big; ++i) v = v + g.input("x" + std::to_string(i), sh);
    v = relu(v);
    Tensor s = g.input("s", {1, 16});
    g.output("a", v * s);
    g.output("b", v - s);
    g.output("c", sum(v * g.input("x0b", sh), {0}));
    const Graph opt = optimize(g);
    size_t reads_x0 = 0;  // the dispatches that read x0
    for (NodeId id = 0; id < opt.size(); ++id) {
      for (NodeId k : opt.node(id).inputs) reads_x0 += opt.node(k).op == Op::input && opt.node(k).name == "x0";
    }
    // 3 consumers: L = 1 and L = 2 are recomputed (3 and 6 reads against 5 and 6); L = 5 is
    // written once (15 reads against 9) and its consumers read it.
    EXPECT_EQ(reads_x0, big <= 2 ? 3u : 1u) << big;
  }
}

// Fused ops are never built by models or differentiated: the op table says so, and these tests
// are their check (the gradient-check coverage test skips GradKind::fused).
TEST(Passes, FusedOpsAreMarked) {
  for (Op op :
       {Op::fused_elementwise, Op::fused_reduce, Op::matmul_epilogue, Op::norm, Op::softmax_scaled, Op::fused_output}) {
    EXPECT_EQ(op_info(op).grad, GradKind::fused) << op_name(op);
    EXPECT_EQ(op_info(op).family, OpFamily::fused) << op_name(op);
  }
}

// The schedule: one launch per dispatch, broadcast layouts collapsed by hand-checked rules, and
// im2col's columns planned as workspace (the kernel takes them from the backend's scratch).
TEST(Schedule, LaunchesAndWorkspace) {
  Graph g;
  Tensor x = g.input("x", {2, 3, 8, 8});
  Tensor w = g.parameter("w", {4, 3, 3, 3}, Init{Init::normal, 0.2});
  Tensor b = g.parameter("b", {1, 4, 1, 1}, Init{Init::normal, 0.2});
  Conv2dOptions co;
  co.pad_h = co.pad_w = 1;
  g.output("y", relu(conv2d(x, w, co) + b));
  Program p = plan(optimize(g));
  Schedule s = lower(p);
  ASSERT_EQ(s.launches.size(), p.dispatches.size());
  bool saw_conv = false, saw_fused = false;
  for (size_t i = 0; i < p.dispatches.size(); ++i) {
    const KernelLaunch& l = s.launches[i];
    EXPECT_FALSE(l.kernel.empty());
    EXPECT_LE(l.push.used, PushConstants::kWords);
    if (p.dispatches[i].op == Op::conv2d) {
      saw_conv = true;
      EXPECT_EQ(l.kernel, "conv2d.im2col");
      // columns of one image: C*KH*KW = 27 rows by OH*OW = 64, f32
      EXPECT_EQ(l.workspace_bytes, 27u * 64u * 4u);
    }
    if (p.dispatches[i].op == Op::fused_elementwise) {
      saw_fused = true;
      using L = ElementwiseLayout;
      // [2,4,8,8] with inputs [2,4,8,8] and [1,4,1,1]: dims (2)(4)(64) -> masks 0b111 and 0b010
      EXPECT_EQ(l.push.get(L::kNumel), 512u);
      EXPECT_EQ(l.push.get(L::kRank), 3u);
      EXPECT_EQ(l.push.get(L::kExtents), 2u);
      EXPECT_EQ(l.push.get(L::kExtents + 1), 4u);
      EXPECT_EQ(l.push.get(L::kExtents + 2), 64u);
      EXPECT_EQ(l.push.get(L::kMasks) & 0xff, 0b111u);
      EXPECT_EQ(l.push.get(L::kMasks) >> 8 & 0xff, 0b010u);
      EXPECT_EQ(l.groups[0], 2u);  // 512 elements / 256 per workgroup
    }
  }
  EXPECT_TRUE(saw_conv);
  EXPECT_TRUE(saw_fused);
  EXPECT_EQ(s.workspace_bytes, 27u * 64u * 4u);
  // The same conv in f64: twice the bytes.
  PlanOptions po;
  po.float_dtype = DType::f64;
  EXPECT_EQ(lower(plan(optimize(g), po)).workspace_bytes, 27u * 64u * 8u);
  // and the CPU backend runs it from that scratch, matching the unfused program
  for (bool f64 : {true, false}) expect_same(g, optimize(g), f64, 2, "conv_bias_relu");
}

TEST(Schedule, BroadcastThatCannotBeCollapsedIsAnError) {
  Graph g;
  // 7 alternating broadcast dimensions cannot be merged into 6
  Tensor a = g.input("a", {2, 1, 2, 1, 2, 1, 2});
  Tensor b = g.input("b", {1, 2, 1, 2, 1, 2, 1});
  FusedAttrs f;
  f.code = {{FusedInstr::input, Op::copy, 0, 0, 0},
            {FusedInstr::input, Op::copy, 1, 0, 0},
            {FusedInstr::binary, Op::add, 0, 0, 0}};
  g.output("y", graph_internal::add_node(g, Op::fused_elementwise, f, {a.id, b.id},
                                         TensorType{DType::f32, {2, 2, 2, 2, 2, 2, 2}}));
  try {
    lower(plan(g));
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[schedule]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meganeura
