// Generator (meganeura/generate.h): a Llama decoder with GQA, tied embeddings and Llama 3 rope
// scaling, through its key/value caches, on the CPU backend and on Vulkan (lavapipe in CI):
// greedy tokens equal recomputing the whole window with build_llama for 64 new tokens; a prompt
// fed in chunks equals it fed a token at a time; a batch equals each sequence alone; reset
// forgets a sequence; sequences at their own positions, fed prompts of different lengths and
// reset one at a time, equal each alone; what does not fit is refused and leaves the sequence as
// it was; the decode program is recorded once on Vulkan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "meganeura/generate.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

models::LlamaConfig small_config() {
  models::LlamaConfig c;
  c.vocab_size = 384;
  c.hidden_size = 64;
  c.intermediate_size = 160;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 256;
  c.rope_theta = 10000;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = true;
  c.rope_scaling = {models::RopeScaling::Type::llama3, 8, 1, 4, 32};
  return c;
}

// Weights drawn so that attention and the MLP, not a token's own embedding, decide the next
// token: greedy tokens vary along the sequence and depend on the cache being right.
void draw_weights(Session& s, uint32_t seed) {
  std::mt19937 rng(seed);
  for (const auto& [name, b] : s.buffers()) {
    if (b.role != Role::parameter) continue;
    const bool norm = name.find("norm") != std::string::npos;
    const double std = norm ? 0.1 : name.find("embed") != std::string::npos ? 0.5 : 0.35;
    std::normal_distribution<double> d(norm ? 1.0 : 0.0, std);
    std::vector<float> v(size_t(b.type.numel()));
    for (float& x : v) x = float(d(rng));
    s.set(name, v);
  }
}

void copy_weights(const Session& from, Session& to) {
  for (const auto& [name, b] : to.buffers())
    if (b.role == Role::parameter) to.write_raw(name, from.read_raw(name));
}

int32_t argmax(std::span<const float> row) { return int32_t(std::max_element(row.begin(), row.end()) - row.begin()); }

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> rows;  // the logits each token was chosen from
  float margin = 1e30f;                  // the smallest top-1 margin among them
  void take(std::span<const float> row) {
    rows.emplace_back(row.begin(), row.end());
    const int32_t best = argmax(row);
    float second = -1e30f;
    for (size_t j = 0; j < row.size(); ++j)
      if (int32_t(j) != best) second = std::max(second, row[j]);
    margin = std::min(margin, row[size_t(best)] - second);
    tokens.push_back(best);
  }
};

Greedy greedy_cached(Generator& gen, std::vector<int32_t> prompt, int n) {
  Greedy r;
  r.take(gen.feed(prompt));
  while (int(r.tokens.size()) < n) r.take(gen.feed(std::vector<int32_t>{r.tokens.back()}));
  return r;
}

// The whole window recomputed for every token (padding after the last token does not reach its
// logits: causal attention).
Greedy greedy_window(const models::LlamaConfig& c, const Session& weights, std::vector<int32_t> ids, int n) {
  const int64_t total = int64_t(ids.size()) + n - 1;
  Graph g;
  g.output("logits", models::build_llama(g, c, 1, total));
  Session s;
  s.add(g);
  copy_weights(weights, s);
  Greedy r;
  while (int(r.tokens.size()) < n) {
    std::vector<int32_t> window = ids;
    window.resize(size_t(total), 0);
    s.set("input_ids", window);
    s.run();
    const auto logits = s.get("logits");
    r.take(std::span<const float>(logits).subspan((ids.size() - 1) * size_t(c.vocab_size), size_t(c.vocab_size)));
    ids.push_back(r.tokens.back());
  }
  return r;
}

double largest_difference(const Greedy& a, const Greedy& b) {
  if (a.rows.size() != b.rows.size()) return 1e30;
  double worst = 0;
  for (size_t t = 0; t < a.rows.size(); ++t)
    for (size_t j = 0; j < a.rows[t].size(); ++j)
      worst = std::max(worst, double(std::abs(a.rows[t][j] - b.rows[t][j])));
  return worst;
}

const std::vector<int32_t> kPrompt = {3, 141, 59, 265, 35, 89, 79, 323, 84, 62, 6};  // 11: chunks 8, 2, 1

TEST(Generator, GreedyTokensThroughTheCacheEqualRecomputingTheWindow) {
  const models::LlamaConfig c = small_config();
  Generator gen(c, {.max_context = 96, .prefill_chunk = 8});
  draw_weights(gen.session(), 1);
  const Greedy cached = greedy_cached(gen, kPrompt, 64);
  const Greedy window = greedy_window(c, gen.session(), kPrompt, 64);
  EXPECT_EQ(cached.tokens, window.tokens);
  EXPECT_EQ(gen.position(), int64_t(kPrompt.size()) + 63);
  // f32 on both sides, different kernels and summation orders: logits of order ten agree to a
  // few 1e-6 relative; 1e-3 bounds that, and every top-1 margin exceeds twice it (checked), so
  // equal tokens are not luck. A position off by one moves logits by more than 0.1.
  const double worst = largest_difference(cached, window);
  EXPECT_LT(worst, 1e-3);
  EXPECT_GT(window.margin, 2e-3);
  std::set<int32_t> distinct(window.tokens.begin(), window.tokens.end());
  EXPECT_GT(distinct.size(), 8u) << "the tokens hardly vary: the test would not see a wrong cache";
  std::printf("64 tokens, %zu distinct; largest logit difference %.3g, smallest top-1 margin %.3g\n", distinct.size(),
              worst, double(window.margin));
}

TEST(Generator, APromptInChunksEqualsItTokenByToken) {
  const models::LlamaConfig c = small_config();
  Generator chunked(c, {.max_context = 32, .prefill_chunk = 8});
  Generator single(c, {.max_context = 32, .prefill_chunk = 1});
  draw_weights(chunked.session(), 2);
  copy_weights(chunked.session(), single.session());
  const std::vector<float> a = chunked.feed(kPrompt);
  std::vector<float> b;
  for (int32_t id : kPrompt) b = single.feed(std::vector<int32_t>{id});
  ASSERT_EQ(a.size(), b.size());
  // Rows computed in different GEMM shapes: summation orders differ, values of order ten.
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << "logit " << i;
}

TEST(Generator, ABatchEqualsEachSequenceAlone) {
  const models::LlamaConfig c = small_config();
  Generator both(c, {.batch = 2, .max_context = 32, .prefill_chunk = 4});
  Generator alone(c, {.max_context = 32, .prefill_chunk = 4});
  draw_weights(both.session(), 3);
  copy_weights(both.session(), alone.session());
  const std::vector<int32_t> second = {7, 7, 300, 2, 19, 250, 11, 0, 5, 381, 44};
  std::vector<int32_t> ids = kPrompt;
  ids.insert(ids.end(), second.begin(), second.end());
  std::vector<std::vector<float>> together;  // [step] -> [2, vocab]
  together.push_back(both.feed(ids));
  for (int step = 0; step < 8; ++step) {
    const auto& last = together.back();
    const std::vector<int32_t> next = {argmax(std::span(last).first(size_t(c.vocab_size))),
                                       argmax(std::span(last).subspan(size_t(c.vocab_size)))};
    together.push_back(both.feed(next));
  }
  for (int b = 0; b < 2; ++b) {
    alone.reset();
    const Greedy r = greedy_cached(alone, b == 0 ? kPrompt : second, 9);
    for (size_t t = 0; t < r.rows.size(); ++t)
      for (int64_t j = 0; j < c.vocab_size; ++j)
        ASSERT_NEAR(together[t][size_t(b * c.vocab_size + j)], r.rows[t][size_t(j)], 1e-4)
            << "sequence " << b << " step " << t << " logit " << j;
  }
}

// Three sequences with prompts of 11, 3 and 1 tokens fed in one call (the longer ones take
// chunks while the shorter sit out), then decoded together, each at its own position; halfway,
// the second is reset and given another prompt while the others sit that call out. Every
// sequence's logits equal it decoded alone (1e-4: rows computed in different GEMM shapes, values
// of order ten, as ABatchEqualsEachSequenceAlone).
void sequences_at_their_own_positions(const SessionOptions& options) {
  const models::LlamaConfig c = small_config();
  const size_t vocab = size_t(c.vocab_size);
  Generator batch(c, {.batch = 3, .max_context = 48, .prefill_chunk = 8, .session = options});
  Generator alone(c, {.max_context = 48, .prefill_chunk = 8, .session = options});
  Session weights;
  {
    Graph g;
    g.output("logits", models::build_llama(g, c, 1, 1));
    weights.add(g);
  }
  draw_weights(weights, 6);
  copy_weights(weights, batch.session());
  copy_weights(weights, alone.session());
  const std::vector<int32_t> later = {200, 100, 50, 25};
  std::vector<std::vector<int32_t>> prompts = {kPrompt, {7, 300, 2}, {42}};
  std::vector<Greedy> got(4);  // the three sequences, and the second's later prompt
  auto take = [&](const std::vector<float>& logits, size_t b, size_t into) {
    got[into].take(std::span(logits).subspan(b * vocab, vocab));
  };
  const std::vector<float>* logits = &batch.feed_each(prompts);
  for (size_t b = 0; b < 3; ++b) take(*logits, b, b);
  EXPECT_EQ(batch.position(0), 11);
  EXPECT_EQ(batch.position(1), 3);
  EXPECT_EQ(batch.position(2), 1);
  for (int step = 0; step < 6; ++step) {
    logits = &batch.feed(std::vector<int32_t>{got[0].tokens.back(), got[1].tokens.back(), got[2].tokens.back()});
    for (size_t b = 0; b < 3; ++b) take(*logits, b, b);
  }
  batch.reset(1);
  logits = &batch.feed_each(std::vector<std::vector<int32_t>>{{}, later, {}});
  take(*logits, 1, 3);
  for (int step = 0; step < 6; ++step) {
    logits = &batch.feed(std::vector<int32_t>{got[0].tokens.back(), got[3].tokens.back(), got[2].tokens.back()});
    for (size_t b : {0, 2}) take(*logits, b, b);
    take(*logits, 1, 3);
  }
  prompts.push_back(later);
  for (size_t i = 0; i < 4; ++i) {
    alone.reset();
    const Greedy want = greedy_cached(alone, prompts[i], int(got[i].tokens.size()));
    EXPECT_EQ(got[i].tokens, want.tokens) << "sequence " << i;
    for (size_t t = 0; t < want.rows.size(); ++t)
      for (size_t j = 0; j < vocab; ++j)
        ASSERT_NEAR(got[i].rows[t][j], want.rows[t][j], 1e-4) << "sequence " << i << " step " << t << " logit " << j;
  }
  EXPECT_THROW(batch.feed_each(std::vector<std::vector<int32_t>>{{1}, {1}}), std::invalid_argument);  // 2 rows of 3
  try {
    batch.feed_each(std::vector<std::vector<int32_t>>{{}, {}, std::vector<int32_t>(36, 1)});  // 13 + 36 > 48
    ADD_FAILURE() << "a sequence passed max_context";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 2: 36 more tokens at position 13"), std::string::npos) << e.what();
  }
  EXPECT_EQ(batch.position(2), 13) << "a refused feed moved the sequence";
}

TEST(Generator, SequencesAtTheirOwnPositionsEqualEachAlone) { sequences_at_their_own_positions({}); }

TEST(Generator, VulkanSequencesAtTheirOwnPositionsEqualEachAlone) {
  MEGANEURA_REQUIRE_VULKAN();
  sequences_at_their_own_positions(testing_vulkan::vulkan_options());
}

// argmax (a composition of max, equal, a weighted max and a cast) against a loop written here:
// the first index on ties, negative and infinite values, a row of one; a row with NaN stays in range.
void argmax_matches_a_loop(const SessionOptions& options) {
  const int64_t rows = 6, n = 50000;  // a vocabulary's width: indices well above 2^15
  std::vector<float> x(size_t(rows * n));
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0, 3);
  for (float& v : x) v = d(rng);
  x[size_t(0 * n + 7)] = x[size_t(0 * n + 49999)] = 100;  // a tie: the first wins
  std::fill_n(x.begin() + 1 * n, n, -5.0f);                // all equal: index 0
  x[size_t(2 * n + n - 1)] = std::numeric_limits<float>::infinity();
  std::fill_n(x.begin() + 3 * n, n, -std::numeric_limits<float>::infinity());
  x[size_t(3 * n + 31337)] = -1e30f;
  x[size_t(4 * n + 40000)] = std::numeric_limits<float>::quiet_NaN();
  Graph g;
  g.output("best", argmax(g.input("x", {2, 3, n})));
  g.output("one", argmax(g.input("y", {4, 1})));
  Session s(options);
  s.add(g);
  s.set("x", x);
  s.set("y", std::vector<float>{3, -1, 0, 2});
  s.run();
  std::vector<int32_t> best(static_cast<size_t>(rows)), one(4);
  s.read_raw("best", std::as_writable_bytes(std::span(best)));
  s.read_raw("one", std::as_writable_bytes(std::span(one)));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data() + r * n;
    int32_t want = 0;
    for (int32_t j = 1; j < int32_t(n); ++j)
      if (row[j] > row[want]) want = j;
    if (r == 4) {  // NaN: any index in [0, n], never outside
      EXPECT_GE(best[size_t(r)], 0);
      EXPECT_LE(best[size_t(r)], int32_t(n));
      continue;
    }
    EXPECT_EQ(best[size_t(r)], want) << "row " << r;
  }
  EXPECT_EQ(best[0], 7);
  EXPECT_EQ(best[3], 31337);
  EXPECT_EQ(one, (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_THROW(argmax(g.input("big", {1, (int64_t(1) << 24) + 1})), std::invalid_argument);
}

TEST(Argmax, MatchesALoop) { argmax_matches_a_loop({}); }

TEST(Argmax, VulkanMatchesALoop) {
  MEGANEURA_REQUIRE_VULKAN();
  argmax_matches_a_loop(testing_vulkan::vulkan_options());
}

// Greedy choices computed with the model (only the ids read back) equal the argmax of the
// logits read back, step by step, for two sequences at their own positions.
void greedy_on_the_device(const SessionOptions& options) {
  const models::LlamaConfig c = small_config();
  Generator a(c, {.batch = 2, .max_context = 48, .prefill_chunk = 8, .session = options});
  Generator b(c, {.batch = 2, .max_context = 48, .prefill_chunk = 8, .session = options});
  Session weights;
  {
    Graph g;
    g.output("logits", models::build_llama(g, c, 1, 1));
    weights.add(g);
  }
  draw_weights(weights, 7);
  copy_weights(weights, a.session());
  copy_weights(weights, b.session());
  const std::vector<std::vector<int32_t>> prompts = {kPrompt, {9, 8, 7}};
  std::vector<int32_t> on_device = a.greedy_each(prompts), read_back(2);
  const std::vector<float>* logits = &b.feed_each(prompts);
  std::set<int32_t> distinct;
  for (int step = 0; step < 24; ++step) {
    for (size_t i = 0; i < 2; ++i)
      read_back[i] = argmax(std::span(*logits).subspan(i * size_t(c.vocab_size), size_t(c.vocab_size)));
    ASSERT_EQ(on_device, read_back) << "step " << step;
    distinct.insert(on_device.begin(), on_device.end());
    on_device = a.feed_greedy(on_device);
    logits = &b.feed(read_back);
  }
  EXPECT_GT(distinct.size(), 8u) << "the choices hardly vary";
}

TEST(Generator, GreedyOnTheDeviceEqualsTheArgmaxOfTheLogits) { greedy_on_the_device({}); }

TEST(Generator, VulkanGreedyOnTheDeviceEqualsTheArgmaxOfTheLogits) {
  MEGANEURA_REQUIRE_VULKAN();
  greedy_on_the_device(testing_vulkan::vulkan_options());
}

// A row's top k as the op defines it, written here with a stable sort: NaN first, then by
// value, the lower index first among equals (-0 and +0 equal).
std::vector<int32_t> top_by_sort(const float* row, int64_t n, int64_t k) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
    const float x = row[a], y = row[b];
    return std::isnan(x) ? !std::isnan(y) : !std::isnan(y) && x > y;
  });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

void top_k_matches_a_sort(const SessionOptions& options) {
  const int64_t rows = 6, n = 50000;  // a vocabulary's width
  std::vector<float> x(size_t(rows * n));
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0, 3);
  for (float& v : x) v = d(rng);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t j = 0; j < n; j += 97) x[size_t(n + j)] = 9.5f;  // row 1: 516 ties at the top, cut by index
  std::fill_n(x.begin() + 2 * n, n, -5.0f);                     // row 2: all equal but a few
  x[size_t(2 * n + 7)] = -0.0f, x[size_t(2 * n + 3)] = 0.0f, x[size_t(2 * n + n - 1)] = inf;
  for (int64_t j = 0; j < n; ++j) x[size_t(3 * n + j)] = j % 3 ? -inf : float(j % 1000) * 0.5f;  // row 3: -inf
  x[size_t(4 * n + 40000)] = x[size_t(4 * n + 12)] = nan;  // row 4: NaN first, the lower index first
  x[size_t(5 * n + 49999)] = 1e30f;
  Graph g;
  Tensor in = g.input("x", {2, 3, n});
  const int64_t ks[] = {1, 50, 1024};
  for (int64_t k : ks) {
    TopK t = top_k(in, k);
    g.output("v" + std::to_string(k), t.values);
    g.output("i" + std::to_string(k), t.indices);
  }
  g.output("small", top_k(g.input("y", {4, 1}), 1).indices);
  Session s(options);
  s.add(g);
  s.set("x", x);
  s.set("y", std::vector<float>{3, -1, 0, 2});
  s.run();
  for (int64_t k : ks) {
    const std::vector<float> values = s.get("v" + std::to_string(k));
    std::vector<int32_t> ids(size_t(rows * k));
    s.read_raw("i" + std::to_string(k), std::as_writable_bytes(std::span(ids)));
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<int32_t> want = top_by_sort(x.data() + r * n, n, k);
      ASSERT_EQ(std::vector<int32_t>(ids.begin() + r * k, ids.begin() + (r + 1) * k), want) << "row " << r << " k " << k;
      for (int64_t j = 0; j < k; ++j) {
        const float got = values[size_t(r * k + j)], w = x[size_t(r * n + want[size_t(j)])];
        ASSERT_TRUE(std::isnan(w) ? std::isnan(got) : std::memcmp(&got, &w, 4) == 0) << "row " << r << " #" << j;
      }
    }
  }
  std::vector<int32_t> small(4);
  s.read_raw("small", std::as_writable_bytes(std::span(small)));
  EXPECT_EQ(small, (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_THROW(top_k(in, 0), std::invalid_argument);
  EXPECT_THROW(top_k(in, 1025), std::invalid_argument);
  EXPECT_THROW(top_k(g.input("z", {2, 5}), 6), std::invalid_argument);
  EXPECT_THROW(top_k(g.input("ids", {2, 5}, DType::i32), 1), std::invalid_argument);
}

TEST(TopK, MatchesASort) { top_k_matches_a_sort({}); }

TEST(TopK, VulkanMatchesASort) {
  MEGANEURA_REQUIRE_VULKAN();
  top_k_matches_a_sort(testing_vulkan::vulkan_options());
}

// The top candidates found with the model (only top_k + 1 logits and ids read back per
// sequence) are the largest of the logits read back, and read_logits() reads those logits
// after the fact, for two sequences at their own positions.
void top_k_on_the_device(const SessionOptions& options) {
  const models::LlamaConfig c = small_config();
  const int64_t k = 8;
  Generator a(c, {.batch = 2, .max_context = 48, .prefill_chunk = 8, .top_k = k, .session = options});
  Generator b(c, {.batch = 2, .max_context = 48, .prefill_chunk = 8, .session = options});
  draw_weights(a.session(), 7);
  copy_weights(a.session(), b.session());
  EXPECT_THROW(b.feed_top_k(std::vector<int32_t>{1, 2}), std::logic_error);
  std::vector<std::vector<int32_t>> rows = {kPrompt, {9, 8, 7}};
  for (int step = 0; step < 12; ++step) {
    const TopCandidates& top = a.top_k_each(rows);
    const std::vector<float>& logits = b.feed_each(rows);
    ASSERT_EQ(top.count, k + 1);
    for (size_t i = 0; i < 2; ++i) {
      const float* row = logits.data() + i * size_t(c.vocab_size);
      const std::vector<int32_t> want = top_by_sort(row, c.vocab_size, k + 1);
      ASSERT_EQ(std::vector<int32_t>(top.ids.begin() + long(i) * (k + 1), top.ids.begin() + long(i + 1) * (k + 1)),
                want)
          << "step " << step << " sequence " << i;
      for (int64_t j = 0; j < k + 1; ++j) ASSERT_EQ(top.logits[i * size_t(k + 1) + size_t(j)], row[want[size_t(j)]]);
    }
    // The sequences the last run finished: after the prompts (11 and 3 tokens) only the first.
    const std::vector<float>& again = a.read_logits();
    const long n = (step == 0 ? 1 : 2) * long(c.vocab_size);
    ASSERT_EQ(std::vector<float>(again.begin(), again.begin() + n), std::vector<float>(logits.begin(), logits.begin() + n))
        << "step " << step;
    rows = {{top.ids[size_t(step % 3)]}, {top.ids[size_t(k + 1)]}};  // not always the largest
  }
  EXPECT_THROW(Generator(c, {.top_k = 1024}), std::invalid_argument);
}

TEST(Generator, TopKOnTheDeviceIsTheLargestOfTheLogits) { top_k_on_the_device({}); }

TEST(Generator, VulkanTopKOnTheDeviceIsTheLargestOfTheLogits) {
  MEGANEURA_REQUIRE_VULKAN();
  top_k_on_the_device(testing_vulkan::vulkan_options());
}

TEST(Generator, ResetForgetsThePreviousSequence) {
  const models::LlamaConfig c = small_config();
  Generator reused(c, {.max_context = 48, .prefill_chunk = 8});
  Generator fresh(c, {.max_context = 48, .prefill_chunk = 8});
  draw_weights(reused.session(), 4);
  copy_weights(reused.session(), fresh.session());
  greedy_cached(reused, kPrompt, 20);  // fills 30 cache rows
  reused.reset();
  const std::vector<int32_t> other = {200, 100, 50, 25};
  const Greedy a = greedy_cached(reused, other, 10), b = greedy_cached(fresh, other, 10);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.rows, b.rows) << "rows left in the cache by the first sequence were read";
}

TEST(Generator, RefusesWhatDoesNotFitAndKeepsTheSequence) {
  const models::LlamaConfig c = small_config();
  Generator gen(c, {.max_context = 16, .prefill_chunk = 8});
  Generator whole(c, {.max_context = 16, .prefill_chunk = 8});
  draw_weights(gen.session(), 5);
  copy_weights(gen.session(), whole.session());
  const std::vector<int32_t> ten(kPrompt.begin(), kPrompt.begin() + 10), six = {1, 2, 3, 4, 5, 6};
  gen.feed(ten);
  try {
    gen.feed(std::vector<int32_t>(7, 1));
    ADD_FAILURE() << "17 tokens fed into a 16-position cache";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("max_context = 16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gen.feed(std::vector<int32_t>{int32_t(c.vocab_size)}), std::invalid_argument);
  EXPECT_THROW(gen.feed(std::vector<int32_t>{-1}), std::invalid_argument);
  EXPECT_THROW(gen.feed(std::vector<int32_t>{}), std::invalid_argument);
  EXPECT_EQ(gen.position(), 10);
  std::vector<int32_t> all = ten;
  all.insert(all.end(), six.begin(), six.end());
  EXPECT_EQ(gen.feed(six), whole.feed(all));  // the same programs on the same cache rows
  EXPECT_EQ(gen.position(), 16);
  EXPECT_THROW(gen.feed(std::vector<int32_t>{1}), std::invalid_argument);

  EXPECT_THROW(Generator(c, {.max_context = 512}), std::invalid_argument);  // > max_position_embeddings
  EXPECT_THROW(Generator(c, {.max_context = 16, .prefill_chunk = 6}), std::invalid_argument);
  EXPECT_THROW(Generator(c, {.batch = 0}), std::invalid_argument);
}

// Vulkan against the CPU window: the same 64 greedy tokens; the decode program is recorded once
// (its first run records uploads and read-backs) and replayed for every later token.
TEST(Generator, VulkanGreedyTokensEqualTheCpuWindowAndDecodeIsRecordedOnce) {
  MEGANEURA_REQUIRE_VULKAN();
  const models::LlamaConfig c = small_config();
  Generator gen(c, {.max_context = 96, .prefill_chunk = 8, .session = testing_vulkan::vulkan_options()});
  Session cpu_weights;
  {
    Graph g;
    g.output("logits", models::build_llama(g, c, 1, 1));
    cpu_weights.add(g);
  }
  draw_weights(cpu_weights, 1);
  copy_weights(cpu_weights, gen.session());
  Greedy cached;
  cached.take(gen.feed(kPrompt));
  cached.take(gen.feed(std::vector<int32_t>{cached.tokens.back()}));
  const Backend::Stats first = gen.session().backend().stats();
  while (cached.tokens.size() < 64) cached.take(gen.feed(std::vector<int32_t>{cached.tokens.back()}));
  const Backend::Stats last = gen.session().backend().stats();
  EXPECT_EQ(last.recordings, first.recordings) << "a decode step recorded command buffers";
  const Greedy window = greedy_window(c, cpu_weights, kPrompt, 64);
  EXPECT_EQ(cached.tokens, window.tokens);
  const double worst = largest_difference(cached, window);
  EXPECT_LT(worst, 1e-3);
  EXPECT_GT(window.margin, 2e-3);
  std::printf("Vulkan: largest logit difference %.3g to the CPU window\n", worst);
}

}  // namespace
}  // namespace meganeura
