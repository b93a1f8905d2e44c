// The character transformer's generation through key/value caches (models::chargpt_cached)
// against recomputing the window for every token with models::chargpt, the way its samples were
// drawn before: the last cfg.seq tokens, positions from 0. With a window of seq positions in
// cached attention the one-block model's greedy tokens agree for 48 new tokens past a 16-token
// window, on random weights and on weights trained a little; attention to every cached key
// instead disagrees once the text is longer than the window, so the comparison can fail. With
// two blocks the two agree up to the window's length; past it the cache keeps what the first
// block computed with its own full window, so the second block sees further back than a
// recomputed window does (as any sliding-window model's stack), and the logits differ by design.
// CPU, and Vulkan (lavapipe in CI) with the decode program recorded once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "meganeura/models.h"
#include "meganeura/train.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

models::CharGptConfig small_config(int64_t layers) {
  models::CharGptConfig c;
  c.vocab = int64_t(models::vocabulary_of(models::builtin_text()).chars.size());
  c.dim = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = layers;
  c.ffn = 64;
  c.seq = 16;
  return c;
}

constexpr int kNew = 48;  // three windows' worth of new tokens
const std::string kPrompt = "The river";

// Weights drawn wide enough that attention, not a token's own embedding, decides the next
// token: greedy tokens vary along the text and depend on which keys attention sees.
void draw_weights(Session& s, uint32_t seed) {
  std::mt19937 rng(seed);
  for (const auto& [name, b] : s.buffers()) {
    if (b.role != Role::parameter) continue;
    const bool norm = name.find("norm") != std::string::npos;
    std::normal_distribution<double> d(norm ? 1.0 : 0.0, norm ? 0.1 : 0.5);
    std::vector<float> v(size_t(b.type.numel()));
    for (float& x : v) x = float(d(rng));
    s.set(name, v);
  }
}

// A few steps of next-character training on the built-in text, so the logits are those of a
// model that has learned something rather than of random weights.
Tensor text_loss(Graph& g, const models::CharGptConfig& c) {
  Tensor ids = g.input("ids", {8, c.seq}, DType::i32);
  Tensor targets = g.input("targets", {8 * c.seq}, DType::i32);
  return cross_entropy(reshape(models::chargpt(g, ids, c), {8 * c.seq, c.vocab}), targets);
}
// Returns the first and last losses.
std::pair<float, float> train_a_little(Trainer& t, const models::CharGptConfig& c, int steps) {
  const std::vector<int32_t> text = models::vocabulary_of(models::builtin_text()).encode(models::builtin_text());
  std::mt19937_64 rng(11);
  std::pair<float, float> losses;
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> ids, targets;
    for (int b = 0; b < 8; ++b) {
      const size_t off = size_t(rng() % (text.size() - size_t(c.seq) - 1));
      ids.insert(ids.end(), text.begin() + int64_t(off), text.begin() + int64_t(off) + c.seq);
      targets.insert(targets.end(), text.begin() + int64_t(off) + 1, text.begin() + int64_t(off) + c.seq + 1);
    }
    t.session().set("ids", std::span<const int32_t>(ids));
    t.session().set("targets", std::span<const int32_t>(targets));
    const float loss = t.step();
    (step == 0 ? losses.first : losses.second) = loss;
  }
  return losses;
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

// The previous sampler's model: the last seq tokens (zero-padded after the text while it is
// shorter; causal attention keeps the padding from its logits), positions from 0, the row of
// the last token. Added to `s`, whose parameters it shares by name.
struct Window {
  Window(Session& s, const models::CharGptConfig& c) : session(s), config(c) {
    Graph g;
    g.output("window_logits", models::chargpt(g, g.input("window_ids", {1, c.seq}, DType::i32), c));
    program = s.add(g);
  }
  Greedy greedy(std::vector<int32_t> text, int n) {
    const size_t seq = size_t(config.seq), vocab = size_t(config.vocab);
    Greedy r;
    while (int(r.tokens.size()) < n) {
      const size_t start = text.size() > seq ? text.size() - seq : 0;
      std::vector<int32_t> window(seq, 0);
      std::copy(text.begin() + int64_t(start), text.end(), window.begin());
      session.set("window_ids", std::span<const int32_t>(window));
      session.run(program);
      const auto logits = session.get("window_logits");
      r.take(std::span<const float>(logits).subspan((text.size() - start - 1) * vocab, vocab));
      text.push_back(r.tokens.back());
    }
    return r;
  }
  Session& session;
  models::CharGptConfig config;
  size_t program = 0;
};

// Through the caches: the prompt in one run, then a one-token program per new token, added
// to `s` (whose parameters they share by name, the training program's included).
struct Cached {
  Cached(Session& s, const models::CharGptConfig& c, int64_t prompt, int64_t max_context) : session(s) {
    for (int64_t n : {prompt, int64_t(1)}) {
      Graph g;
      Tensor ids = g.input("gen_ids." + std::to_string(n), {1, n}, DType::i32);
      g.output("gen_logits." + std::to_string(n),
               models::chargpt_cached(g, ids, g.input("gen_position", {1}, DType::i32), max_context, c));
      programs.push_back(s.add(g));
    }
  }
  std::vector<float> feed(const std::vector<int32_t>& ids, int64_t position) {
    const std::string n = std::to_string(ids.size());
    session.set("gen_ids." + n, std::span<const int32_t>(ids));
    session.set("gen_position", std::vector<int32_t>{int32_t(position)});
    session.run(programs[ids.size() == 1 ? 1 : 0]);
    return session.get("gen_logits." + n);
  }
  Greedy greedy(std::vector<int32_t> text, int n) {
    Greedy r;
    r.take(feed(text, 0));
    while (int(r.tokens.size()) < n) {
      text.push_back(r.tokens.back());
      r.take(feed({text.back()}, int64_t(text.size()) - 1));
    }
    return r;
  }
  Session& session;
  std::vector<size_t> programs;
};

void copy_weights(const Session& from, Session& to) {
  for (const auto& [name, b] : to.buffers())
    if (b.role == Role::parameter) to.write_raw(name, from.read_raw(name));
}

// The largest logit difference over the tokens chosen from texts of [from, to) tokens.
double largest_difference(const Greedy& a, const Greedy& b, size_t prompt, size_t from, size_t to) {
  double worst = 0;
  for (size_t t = 0; t < a.rows.size() && t < b.rows.size(); ++t) {
    const size_t length = prompt + t;  // the text the row was computed from
    if (length < from || length >= to) continue;
    for (size_t j = 0; j < a.rows[t].size(); ++j)
      worst = std::max(worst, double(std::abs(a.rows[t][j] - b.rows[t][j])));
  }
  return worst;
}

const std::vector<int32_t>& prompt_ids() {
  static const std::vector<int32_t> ids = models::vocabulary_of(models::builtin_text()).encode(kPrompt);
  return ids;
}
int64_t context() { return int64_t(prompt_ids().size()) + kNew; }

// Cached greedy tokens on `s` (the weights, the window program and the cached programs already
// added) against the window; then a cached model that attends to every key (a window as long
// as the cache) against it, which must disagree once the text passes the window.
void expect_cache_equals_window(Session& s, Cached& cached, Window& window, const char* what) {
  const models::CharGptConfig& c = window.config;
  const size_t prompt = prompt_ids().size(), seq = size_t(c.seq);
  const Greedy a = cached.greedy(prompt_ids(), kNew), w = window.greedy(prompt_ids(), kNew);
  EXPECT_EQ(a.tokens, w.tokens) << what;
  // f32 on both sides, different kernels and summation orders: 1e-3 bounds the rounding of
  // logits of order ten, and every top-1 margin exceeds twice it (checked), so equal tokens
  // are not luck.
  const double worst = largest_difference(a, w, prompt, 0, SIZE_MAX);
  EXPECT_LT(worst, 1e-3) << what;
  EXPECT_GT(w.margin, 2e-3) << what;
  const std::set<int32_t> distinct(w.tokens.begin(), w.tokens.end());
  EXPECT_GT(distinct.size(), 4u) << what << ": the tokens hardly vary, a wrong window would go unseen";

  models::CharGptConfig every_key = c;
  every_key.seq = context();
  Session other;
  Cached unwindowed(other, every_key, int64_t(prompt), context());
  copy_weights(s, other);
  const Greedy u = unwindowed.greedy(prompt_ids(), kNew);
  const double inside = largest_difference(u, w, prompt, 0, seq + 1);
  const double past = largest_difference(u, w, prompt, seq + 1, SIZE_MAX);
  EXPECT_LT(inside, 1e-3) << what << ": the texts of up to seq tokens fit the window";
  EXPECT_GT(past, 1e-2) << what << ": attending to every key went unnoticed";
  std::printf(
      "%s: %d tokens, %zu distinct; largest logit difference %.3g, smallest top-1 margin %.3g; "
      "every key instead: %.3g within the window, %.3g past it\n",
      what, kNew, distinct.size(), worst, double(w.margin), inside, past);
}

TEST(CharGptGeneration, OneBlockThroughTheCacheEqualsTheSlidingWindowOnRandomWeights) {
  const models::CharGptConfig c = small_config(1);
  Session s;
  Window window(s, c);
  Cached cached(s, c, int64_t(prompt_ids().size()), context());
  draw_weights(s, 1);
  expect_cache_equals_window(s, cached, window, "random weights");
}

// The programs are added to the trainer's session after training, as `meganeura train` does:
// they find the trained parameters by name.
TEST(CharGptGeneration, OneBlockThroughTheCacheEqualsTheSlidingWindowAfterTraining) {
  const models::CharGptConfig c = small_config(1);
  Trainer t([&](Graph& g) { return text_loss(g, c); }, OptimizerConfig{.kind = OptimizerConfig::Kind::adam, .lr = 1e-2},
            SessionOptions{.seed = 5});
  const auto [first, last] = train_a_little(t, c, 60);
  EXPECT_LT(last, first - 1.0) << "training did not move the weights far from their initialisation";
  std::printf("loss %.2f -> %.2f in 60 steps\n", double(first), double(last));
  Window window(t.session(), c);
  Cached cached(t.session(), c, int64_t(prompt_ids().size()), context());
  expect_cache_equals_window(t.session(), cached, window, "trained weights");
}

// Two blocks: the same logits while the text fits the window; past it the cached keys of the
// second block come from first-block states that saw a whole window of their own, which a
// recomputed window cuts short, so the logits differ (by design, not by rounding).
TEST(CharGptGeneration, TwoBlocksEqualTheWindowUntilItSlides) {
  const models::CharGptConfig c = small_config(2);
  Session s;
  Window window(s, c);
  Cached cached(s, c, int64_t(prompt_ids().size()), context());
  draw_weights(s, 2);
  const size_t prompt = prompt_ids().size(), seq = size_t(c.seq);
  const Greedy a = cached.greedy(prompt_ids(), kNew), w = window.greedy(prompt_ids(), kNew);
  const double inside = largest_difference(a, w, prompt, 0, seq + 1);
  const double past = largest_difference(a, w, prompt, seq + 1, SIZE_MAX);
  EXPECT_LT(inside, 1e-3);
  const size_t same =
      size_t(std::mismatch(a.tokens.begin(), a.tokens.end(), w.tokens.begin()).first - a.tokens.begin());
  EXPECT_GE(same, seq + 1 - prompt) << "tokens drawn from texts of up to seq tokens differ";
  std::printf("two blocks: largest logit difference %.3g within the window, %.3g past it; first %zu tokens equal\n",
              inside, past, same);
}

// Vulkan against the CPU window: the same greedy tokens; the decode program is recorded once
// (its first run records uploads and read-backs) and replayed for every later token.
TEST(CharGptGeneration, VulkanThroughTheCacheEqualsTheCpuWindowAndDecodeIsRecordedOnce) {
  MEGANEURA_REQUIRE_VULKAN();
  const models::CharGptConfig c = small_config(1);
  Session cpu;
  Window window(cpu, c);
  draw_weights(cpu, 1);
  Session gpu(testing_vulkan::vulkan_options());
  Cached cached(gpu, c, int64_t(prompt_ids().size()), context());
  copy_weights(cpu, gpu);
  std::vector<int32_t> text = prompt_ids();
  Greedy a;
  a.take(cached.feed(text, 0));
  for (int i = 0; i < 2; ++i) {
    text.push_back(a.tokens.back());
    a.take(cached.feed({text.back()}, int64_t(text.size()) - 1));
  }
  const Backend::Stats first = gpu.backend().stats();
  while (int(a.tokens.size()) < kNew) {
    text.push_back(a.tokens.back());
    a.take(cached.feed({text.back()}, int64_t(text.size()) - 1));
  }
  EXPECT_EQ(gpu.backend().stats().recordings, first.recordings) << "a decode step recorded command buffers";
  const Greedy w = window.greedy(prompt_ids(), kNew);
  EXPECT_EQ(a.tokens, w.tokens);
  const double worst = largest_difference(a, w, prompt_ids().size(), 0, SIZE_MAX);
  EXPECT_LT(worst, 1e-3);
  EXPECT_GT(w.margin, 2e-3);
  std::printf("Vulkan: largest logit difference %.3g to the CPU window\n", worst);
}

}  // namespace
}  // namespace meganeura
