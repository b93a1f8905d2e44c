// The key/value cache ops (kv_cache_write, cached_attention, rope_at) on the CPU backend,
// against formulas written here in double: cached attention over the cache prefix (grouped
// heads, sliding window, decode and prefill at pos > 0), the cache write in place into its
// state, positions outside the cache refused at run time, autodiff refused; and the property
// generation rests on: a prefill then decode steps through the cache give the rows of full
// causal attention over the whole sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kv_cache_case.h"
#include "meganeura/autodiff.h"
#include "meganeura/session.h"

namespace meganeura {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

struct AttnCase {
  int64_t b, h, hkv, s, tmax, d, dv, pos, window;
};

// softmax(q k^T * scale) v for query rows at pos..pos+S-1 over keys [lo, pos + i], in double.
std::vector<double> reference_attention(const AttnCase& c, const std::vector<float>& q, const std::vector<float>& k,
                                        const std::vector<float>& v) {
  std::vector<double> out(size_t(c.b * c.h * c.s * c.dv));
  const double scale = 1.0 / std::sqrt(double(c.d));
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t h = 0; h < c.h; ++h)
      for (int64_t i = 0; i < c.s; ++i) {
        const int64_t kvh = bi * c.hkv + h / (c.h / c.hkv), qpos = c.pos + i;
        const int64_t lo = c.window > 0 ? std::max<int64_t>(0, qpos - c.window + 1) : 0;
        const float* qr = &q[size_t(((bi * c.h + h) * c.s + i) * c.d)];
        std::vector<double> w;
        double mx = -1e300, sum = 0;
        for (int64_t j = lo; j <= qpos; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < c.d; ++e) dot += double(qr[e]) * double(k[size_t((kvh * c.tmax + j) * c.d + e)]);
          w.push_back(dot * scale);
          mx = std::max(mx, w.back());
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int64_t e = 0; e < c.dv; ++e) {
          double acc = 0;
          for (int64_t j = lo; j <= qpos; ++j)
            acc += w[size_t(j - lo)] * double(v[size_t((kvh * c.tmax + j) * c.dv + e)]);
          out[size_t(((bi * c.h + h) * c.s + i) * c.dv + e)] = acc / sum;
        }
      }
  return out;
}

class CachedAttention : public testing::TestWithParam<AttnCase> {};

TEST_P(CachedAttention, MatchesTheFormulaOverTheCachePrefix) {
  const AttnCase c = GetParam();
  Graph g;
  Tensor q = g.input("q", {c.b, c.h, c.s, c.d});
  Tensor k = g.input("k", {c.b, c.hkv, c.tmax, c.d});
  Tensor v = g.input("v", {c.b, c.hkv, c.tmax, c.dv});
  Tensor pos = g.input("pos", {1}, DType::i32);
  g.output("y", cached_attention(q, k, v, pos, c.window));
  Session s;
  s.add(g);
  const auto qv = random_values(size_t(c.b * c.h * c.s * c.d), 1);
  auto kv = random_values(size_t(c.b * c.hkv * c.tmax * c.d), 2);
  auto vv = random_values(size_t(c.b * c.hkv * c.tmax * c.dv), 3);
  // Positions past pos + S hold huge values: reading any of them would swamp the result.
  for (int64_t r = 0; r < c.b * c.hkv; ++r)
    for (int64_t j = c.pos + c.s; j < c.tmax; ++j) {
      for (int64_t e = 0; e < c.d; ++e) kv[size_t((r * c.tmax + j) * c.d + e)] = 1e4f;
      for (int64_t e = 0; e < c.dv; ++e) vv[size_t((r * c.tmax + j) * c.dv + e)] = 1e4f;
    }
  s.set("q", qv);
  s.set("k", kv);
  s.set("v", vv);
  s.set("pos", std::vector<int32_t>{int32_t(c.pos)});
  s.run();
  const auto y = s.get("y");
  const auto want = reference_attention(c, qv, kv, vv);
  ASSERT_EQ(y.size(), want.size());
  // The kernel accumulates in double from f32 inputs; the output is a convex combination of
  // values in [-1, 1] rounded once to f32: an error of a few 1e-8. 1e-6 leaves margin while a
  // wrong key range, head or scale errs by 1e-2 or more.
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-6) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Cases, CachedAttention,
                         testing::Values(AttnCase{1, 4, 2, 1, 16, 8, 8, 0, 0},   // decode at 0
                                         AttnCase{2, 4, 2, 1, 16, 8, 6, 9, 0},   // decode, GQA
                                         AttnCase{1, 6, 2, 1, 16, 8, 8, 11, 4},  // decode, window
                                         AttnCase{2, 4, 1, 5, 16, 8, 8, 3, 0},   // prefill at pos 3
                                         AttnCase{1, 4, 4, 6, 12, 4, 4, 6, 3},   // prefill, window, full
                                         AttnCase{1, 2, 2, 7, 7, 8, 8, 0, 0}),   // whole cache
                         [](const testing::TestParamInfo<AttnCase>& i) {
                           const AttnCase& c = i.param;
                           return "h" + std::to_string(c.h) + "kv" + std::to_string(c.hkv) + "s" + std::to_string(c.s) +
                                  "pos" + std::to_string(c.pos) + "w" + std::to_string(c.window);
                         });

// A cache state written by kv_cache_write, result assigned to it.
struct CacheProgram {
  Graph g;
  Tensor cache, rows, pos;
  CacheProgram(int64_t b, int64_t h, int64_t t, int64_t s, int64_t d) {
    cache = g.state("cache.k", {b, h, t, d});
    rows = g.input("rows", {b, h, s, d});
    pos = g.input("pos", {1}, DType::i32);
    g.assign(cache, kv_cache_write(cache, rows, pos));
  }
};

TEST(KvCacheWrite, WritesRowsInPlaceIntoTheState) {
  const int64_t b = 2, h = 3, t = 8, s = 2, d = 4;
  CacheProgram p(b, h, t, s, d);
  Session sess;
  sess.add(p.g);
  // Planned in place: the write's output is the state itself and no dispatch copies the cache.
  const Program& prog = sess.program();
  int writes = 0;
  for (const Dispatch& di : prog.dispatches) {
    EXPECT_NE(di.op, Op::copy) << "the cache is copied each step";
    if (di.op != Op::kv_cache_write) continue;
    ++writes;
    EXPECT_EQ(prog.tensors[di.write()].role, Role::state);
    EXPECT_EQ(prog.tensors[di.write()].binding, "cache.k");
    EXPECT_EQ(prog.tensors[di.reads[0]].binding, "cache.k");
  }
  EXPECT_EQ(writes, 1);
  std::vector<float> want(size_t(b * h * t * d), 0.0f);  // the state starts at zeros
  for (int32_t pos : {0, 2, 6, 3}) {
    const auto rows = random_values(size_t(b * h * s * d), uint32_t(pos + 10));
    sess.set("rows", rows);
    sess.set("pos", std::vector<int32_t>{pos});
    sess.run();
    for (int64_t o = 0; o < b * h; ++o)
      for (int64_t i = 0; i < s * d; ++i) want[size_t((o * t + pos) * d + i)] = rows[size_t(o * s * d + i)];
    EXPECT_EQ(sess.get("cache.k"), want) << "after writing at " << pos;  // copies: exact
  }
}

TEST(KvCacheWrite, RefusesAPositionOutsideTheCacheAndLeavesItUnchanged) {
  CacheProgram p(1, 2, 8, 3, 4);
  Session sess;
  sess.add(p.g);
  sess.set("rows", random_values(24, 5));
  sess.set("pos", std::vector<int32_t>{5});  // rows 5..7: the last that fit
  sess.run();
  const auto before = sess.get("cache.k");
  for (int32_t bad : {6, 100, -2}) {
    sess.set("pos", std::vector<int32_t>{bad});
    try {
      sess.run();
      FAIL() << "position " << bad << " was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("position " + std::to_string(bad)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cache of 8 positions"), std::string::npos) << e.what();
    }
    EXPECT_EQ(sess.get("cache.k"), before);
  }
}

// A batch whose sequences are at their own positions (one position per sequence), -1 an idle
// sequence: rows written at each sequence's position, attention over each sequence's own prefix,
// rows rotated at each sequence's positions; the idle sequence writes nothing, attends to
// nothing (zero rows) and rotates as position 0. Against the formulas in double: the cache is
// copied (exact); attention and rope accumulate in double and round once to f32 (values in
// [-1, 1]): 1e-6 is a few ulp, while another sequence's position errs by 1e-2 or more.
TEST(KvCache, SequencesAtTheirOwnPositions) {
  const kv_case::Batch m;
  Session s;
  s.add(kv_case::batch_graph(m));
  for (const std::vector<int32_t>& pos : {std::vector<int32_t>{5, -1, 0}, {10, 3, -1}, {0, 7, 2}, {-1, -1, -1}})
    kv_case::check_batch(s, m, pos, uint32_t(pos[0] + 50), 1e-6);
  const auto before = s.get("cache.k");
  for (const auto& [pos, message] : {std::pair{std::vector<int32_t>{5, -2, 0}, "sequence 1: position -2 with 2"},
                                     std::pair{std::vector<int32_t>{11, 0, 0}, "sequence 0: position 11 with 2"}}) {
    s.set("pos", pos);
    try {
      s.run();
      FAIL() << message << " was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.get("cache.k"), before) << "a refused run wrote the cache";
  }
}

TEST(CachedAttention, RefusesAPositionPastTheCache) {
  Graph g;
  Tensor q = g.input("q", {1, 2, 2, 4});
  Tensor k = g.input("k", {1, 1, 6, 4});
  Tensor pos = g.input("pos", {1}, DType::i32);
  g.output("y", cached_attention(q, k, k, pos));
  Session s;
  s.add(g);
  s.set("pos", std::vector<int32_t>{5});  // rows 5 and 6 of a cache of 6
  EXPECT_THROW(s.run(), std::runtime_error);
  s.set("pos", std::vector<int32_t>{4});
  EXPECT_NO_THROW(s.run());
}

TEST(KvCache, BuildersRefuseMalformedOperands) {
  Graph g;
  Tensor c = g.state("c", {1, 2, 8, 4});
  Tensor pos = g.input("pos", {1}, DType::i32);
  EXPECT_THROW(kv_cache_write(c, g.input("r", {1, 2, 9, 4}), pos), std::invalid_argument);   // S > Tmax
  EXPECT_THROW(kv_cache_write(c, g.input("r2", {1, 3, 1, 4}), pos), std::invalid_argument);  // heads
  EXPECT_THROW(kv_cache_write(c, g.input("r3", {1, 2, 1, 4}), g.input("pf", {1})), std::invalid_argument);
  EXPECT_THROW(kv_cache_write(c, g.input("r4", {1, 2, 1, 4}), g.input("p2", {2}, DType::i32)), std::invalid_argument);
  EXPECT_THROW(cached_attention(g.input("q", {1, 3, 1, 4}), c, c, pos), std::invalid_argument);  // 3 % 2
  EXPECT_THROW(cached_attention(g.input("q2", {1, 4, 1, 4}), c, c, pos, -1), std::invalid_argument);
  EXPECT_THROW(rope_at(g.input("x", {2, 3}), g.input("pf2", {1})), std::invalid_argument);
}

TEST(KvCache, AutodiffRefusesToDifferentiateThroughTheCache) {
  Graph g;
  Tensor q = g.parameter("q", {1, 2, 1, 4}, Init{Init::normal, 1});
  Tensor c = g.state("c", {1, 1, 4, 4});
  Tensor pos = g.input("pos", {1}, DType::i32);
  Tensor y = cached_attention(q, c, c, pos);
  try {
    grad(sum(y), {q});
    FAIL() << "autodiff went through cached_attention";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cached_attention"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("inference only"), std::string::npos) << e.what();
  }
  Tensor rows = g.parameter("rows", {1, 1, 1, 4}, Init{Init::normal, 1});
  EXPECT_THROW(grad(sum(kv_cache_write(c, rows, pos)), {rows}), std::invalid_argument);
}

TEST(RopeAt, RotatesAtTheOffsetPositions) {
  const int64_t rows = 3, seq = 4, dim = 6;
  const double theta = 100;
  Graph g;
  Tensor x = g.input("x", {rows, seq, dim});
  g.output("y", rope_at(x, g.input("off", {1}, DType::i32), theta));
  Session s;
  s.add(g);
  const auto xv = random_values(size_t(rows * seq * dim), 7);
  s.set("x", xv);
  for (int32_t off : {0, 5, 1000}) {
    s.set("off", std::vector<int32_t>{off});
    s.run();
    const auto y = s.get("y");
    for (int64_t r = 0; r < rows * seq; ++r)
      for (int64_t i = 0; i < dim / 2; ++i) {
        const double a = double(off + r % seq) * std::pow(theta, -2.0 * double(i) / double(dim));
        const double x1 = xv[size_t(r * dim + i)], x2 = xv[size_t(r * dim + i + dim / 2)];
        // Angles in double, one f32 rounding of results in [-2, 2]: 1e-6 is a few ulp.
        EXPECT_NEAR(y[size_t(r * dim + i)], x1 * std::cos(a) - x2 * std::sin(a), 1e-6);
        EXPECT_NEAR(y[size_t(r * dim + i + dim / 2)], x2 * std::cos(a) + x1 * std::sin(a), 1e-6);
      }
  }
}

// With Llama 3 frequency scaling, rows at offset `off` equal rows off..off+S-1 of rope over
// the whole sequence (the rope kernel, whose scaled frequencies are checked against
// transformers in llama_torch_reference): both rotate by the same angles in double.
TEST(RopeAt, ScaledRowsEqualRopeOverTheWholeSequence) {
  RopeAttrs a;
  a.theta = 500000;
  a.factor = 8;
  a.low_freq_factor = 1;
  a.high_freq_factor = 4;
  a.original_max_position = 64;
  const int64_t heads = 2, seq = 3, total = 120, dim = 16;
  for (int32_t off : {0, 50, 117}) {
    Graph g;
    Tensor x = g.input("x", {heads, seq, dim});
    g.output("y", rope_at_scaled(x, g.input("off", {1}, DType::i32), a));
    Tensor whole = g.input("whole", {heads, total, dim});
    g.output("ref", rope_scaled(whole, a));
    Session s;
    s.add(g);
    const auto xv = random_values(size_t(heads * seq * dim), 11);
    std::vector<float> wv(size_t(heads * total * dim), 0.0f);
    for (int64_t h = 0; h < heads; ++h)
      std::copy_n(xv.begin() + h * seq * dim, seq * dim, wv.begin() + (h * total + off) * dim);
    s.set("x", xv);
    s.set("whole", wv);
    s.set("off", std::vector<int32_t>{off});
    s.run();
    const auto y = s.get("y"), ref = s.get("ref");
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seq * dim; ++i)  // both: angles in double, one f32 rounding
        EXPECT_NEAR(y[size_t(h * seq * dim + i)], ref[size_t((h * total + off) * dim + i)], 1e-6) << "offset " << off;
  }
  Graph g;
  RopeAttrs bad = a;
  bad.high_freq_factor = 0.5;
  EXPECT_THROW(rope_at_scaled(g.input("x", {2, 4}), g.input("off", {1}, DType::i32), bad), std::invalid_argument);
}

// Prefill of P tokens at position 0, then one token per decode step: every output row equals
// the row of causal attention over the whole sequence (rope at the same absolute positions).
// Two programs share the cache states by name; the decode program runs for every step with
// only `pos` changed.
TEST(KvCache, PrefillThenDecodeMatchesFullCausalAttention) {
  const kv_case::Dims m;
  const int64_t prompt = 5, total = 21;  // 16 decode steps
  Session s;
  const size_t prefill = s.add(kv_case::step_graph(m, prompt));
  const size_t decode = s.add(kv_case::step_graph(m, 1));
  const size_t full = s.add(kv_case::full_graph(m, total));
  const auto q = random_values(size_t(m.b * m.h * total * m.d), 11);
  const auto k = random_values(size_t(m.b * m.hkv * total * m.d), 12);
  const auto v = random_values(size_t(m.b * m.hkv * total * m.d), 13);
  s.set("q_all", q);
  s.set("k_all", k);
  s.set("v_all", v);
  s.run(full);
  const auto y_all = s.get("y_all");  // [B, H, T, D]
  // Both sides are f32 softmax-weighted averages of values in [-1, 1] with rotations computed
  // in double; they differ only in summation order and f32 rounding of the rotated rows (a few
  // ulp each): 1e-5 covers that, while a position off by one changes rows by 1e-2 or more.
  auto expect_rows = [&](const std::vector<float>& y, int64_t t0, int64_t n) {
    const auto want = kv_case::steps(y_all, m.b * m.h, total, m.d, t0, n);
    ASSERT_EQ(y.size(), want.size());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-5) << "position " << t0 << " element " << i;
  };
  auto run_step = [&](size_t program, int64_t t0, int64_t n) {
    s.set(kv_case::named("q", n), kv_case::steps(q, m.b * m.h, total, m.d, t0, n));
    s.set(kv_case::named("k", n), kv_case::steps(k, m.b * m.hkv, total, m.d, t0, n));
    s.set(kv_case::named("v", n), kv_case::steps(v, m.b * m.hkv, total, m.d, t0, n));
    s.set("pos", std::vector<int32_t>{int32_t(t0)});
    s.run(program);
    expect_rows(s.get(kv_case::named("y", n)), t0, n);
  };
  run_step(prefill, 0, prompt);
  for (int64_t t = prompt; t < total; ++t) run_step(decode, t, 1);
}

// Greedy decoding of 16 new tokens: through the cache (a prefill of the prompt, then one
// token per decode step) and by recomputing the whole window for every token (causal: the
// logits at position t do not depend on the padding after it) give the same tokens, with
// logits equal to within f32 summation-order noise.
TEST(KvCache, DecoderGreedyTokensMatchRecomputingTheWindow) {
  const kv_case::Lm c;
  const std::vector<int32_t> prompt = {1, 17, 300, 42};
  const int64_t total = int64_t(prompt.size()) + 16;
  Session s(SessionOptions{.seed = 3});
  const size_t full = s.add(kv_case::lm_graph(c, total, false, 0));
  const size_t prefill = s.add(kv_case::lm_graph(c, int64_t(prompt.size()), true, total));
  const size_t decode = s.add(kv_case::lm_graph(c, 1, true, total));
  const kv_case::Greedy window = kv_case::greedy_full(s, full, c, prompt, total);
  const kv_case::Greedy cached = kv_case::greedy_cached(s, prefill, decode, c, prompt, total);
  EXPECT_EQ(cached.tokens, window.tokens);
  // Logits of order one, computed in f32 by two summation orders (the cache's per-row attention
  // against the whole-window kernels): a few 1e-6 apart. 1e-4 bounds that with margin, while a
  // wrong position or key range moves logits by 1e-2 or more.
  const double worst = kv_case::largest_difference(cached, window);
  EXPECT_LT(worst, 1e-4);
  // Logits within 1e-4 cannot flip a choice whose top-1 margin exceeds 2e-4: equal tokens are
  // not luck. And the tokens vary (the model does not just repeat its input).
  EXPECT_GT(window.margin, 2e-4);
  EXPECT_GE(std::set<int32_t>(window.tokens.begin() + int64_t(prompt.size()), window.tokens.end()).size(), 8u);
  std::printf("greedy tokens:");
  for (int32_t t : window.tokens) std::printf(" %d", t);
  std::printf("\nlargest logit difference %.3g, smallest top-1 margin %.3g\n", worst, double(window.margin));
}

}  // namespace
}  // namespace meganeura
