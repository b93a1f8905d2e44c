// The character transformer's generation by context shift (CharGptGenerator: key/value caches
// of seq positions, the context restarting from position 0 with its last `keep` tokens when it
// is full) against the same algorithm written here by recomputation: models::chargpt over the
// tokens since the last restart, positions from 0, for every token. Greedy tokens equal and
// logits within 2e-4 for 48 new tokens (five restarts at seq 16, keep 8), for one and two
// blocks, random weights and weights trained a little, a prompt shorter and one longer than the
// window; keep = seq - 1 equals recomputing the last seq tokens (the sampler's way before). A
// cached window sliding over the whole text instead, without restarts, is caught past seq.
// CPU, and Vulkan (lavapipe in CI) with every program recorded once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "meganeura/generate.h"
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

constexpr int kNew = 48;  // three windows' worth of new tokens: five restarts after a short prompt

const std::vector<int32_t>& encode(const std::string& s) {
  static std::map<std::string, std::vector<int32_t>> cache;
  auto [it, added] = cache.try_emplace(s);
  if (added) it->second = models::vocabulary_of(models::builtin_text()).encode(s);
  return it->second;
}
const std::string kShortPrompt = "The river";                                      // 9 tokens
const std::string kLongPrompt = "The river wakes before the town does. At first";  // 46: longer than seq

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

void copy_weights(const Session& from, Session& to) {
  for (const auto& [name, b] : to.buffers())
    if (b.role == Role::parameter) to.write_raw(name, from.read_raw(name));
}

// A few steps of next-character training on the built-in text, so the logits are those of a
// model that has learned something rather than of random weights.
Tensor text_loss(Graph& g, const models::CharGptConfig& c) {
  Tensor ids = g.input("ids", {8, c.seq}, DType::i32);
  Tensor targets = g.input("targets", {8 * c.seq}, DType::i32);
  return cross_entropy(reshape(models::chargpt(g, ids, c), {8 * c.seq, c.vocab}), targets);
}
// A trainer after `steps` steps; checks that the loss fell.
std::unique_ptr<Trainer> trained(const models::CharGptConfig& c, int steps = 60) {
  auto t = std::make_unique<Trainer>([&](Graph& g) { return text_loss(g, c); },
                                     OptimizerConfig{.kind = OptimizerConfig::Kind::adam, .lr = 1e-2},
                                     SessionOptions{.seed = 5});
  const std::vector<int32_t> text = models::vocabulary_of(models::builtin_text()).encode(models::builtin_text());
  std::mt19937_64 rng(11);
  float first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> ids, targets;
    for (int b = 0; b < 8; ++b) {
      const size_t off = size_t(rng() % (text.size() - size_t(c.seq) - 1));
      ids.insert(ids.end(), text.begin() + int64_t(off), text.begin() + int64_t(off) + c.seq);
      targets.insert(targets.end(), text.begin() + int64_t(off) + 1, text.begin() + int64_t(off) + c.seq + 1);
    }
    t->session().set("ids", std::span<const int32_t>(ids));
    t->session().set("targets", std::span<const int32_t>(targets));
    (step == 0 ? first : last) = t->step();
  }
  EXPECT_LT(last, first - 1.0) << "training did not move the weights far from their initialisation";
  std::printf("%lld blocks: loss %.2f -> %.2f in %d steps\n", (long long)c.layers, double(first), double(last), steps);
  return t;
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

// The reference: models::chargpt over a context of at most seq tokens (zero-padded after it;
// causal attention keeps the padding from its logits), positions from 0, the row of its last
// token. Added to `s`, whose parameters it shares by name.
struct Recompute {
  Recompute(Session& s, const models::CharGptConfig& c) : session(s), config(c) {
    Graph g;
    g.output("window_logits", models::chargpt(g, g.input("window_ids", {1, c.seq}, DType::i32), c));
    program = s.add(g);
  }
  std::vector<float> logits(const std::vector<int32_t>& context) {
    const size_t seq = size_t(config.seq), vocab = size_t(config.vocab);
    std::vector<int32_t> window(seq, 0);
    std::copy(context.begin(), context.end(), window.begin());
    session.set("window_ids", std::span<const int32_t>(window));
    session.run(program);
    const auto all = session.get("window_logits");
    return {all.begin() + int64_t((context.size() - 1) * vocab), all.begin() + int64_t(context.size() * vocab)};
  }
  // Context shift, token by token, the prompt's tokens included: a token that finds the
  // context full (seq tokens) starts a new one after the last `keep` tokens of the old.
  Greedy context_shift(const std::vector<int32_t>& prompt, int n, int64_t keep) {
    std::vector<int32_t> context;
    auto push = [&](int32_t t) {
      if (int64_t(context.size()) == config.seq) context = std::vector<int32_t>(context.end() - keep, context.end());
      context.push_back(t);
    };
    for (int32_t t : prompt) push(t);
    Greedy r;
    r.take(logits(context));
    while (int(r.tokens.size()) < n) {
      push(r.tokens.back());
      r.take(logits(context));
    }
    return r;
  }
  // The sampler before the caches: the last seq tokens for every token.
  Greedy last_window(std::vector<int32_t> text, int n) {
    const size_t seq = size_t(config.seq);
    Greedy r;
    while (int(r.tokens.size()) < n) {
      r.take(logits(std::vector<int32_t>(text.end() - int64_t(std::min(seq, text.size())), text.end())));
      text.push_back(r.tokens.back());
    }
    return r;
  }
  Session& session;
  models::CharGptConfig config;
  size_t program = 0;
};

Greedy generate(CharGptGenerator& gen, const std::vector<int32_t>& prompt, int n) {
  Greedy r;
  r.take(gen.start(prompt));
  while (int(r.tokens.size()) < n) r.take(gen.next(r.tokens.back()));
  return r;
}

// A cached window sliding over the whole text, never restarting (the first way generation used
// the caches): the prompt in one run, then one token per run, on a session of its own.
Greedy sliding(const Session& weights, const models::CharGptConfig& c, const std::vector<int32_t>& prompt, int n) {
  Session s;
  const int64_t max_context = int64_t(prompt.size()) + n;
  std::vector<size_t> programs;
  for (int64_t len : {int64_t(prompt.size()), int64_t(1)}) {
    Graph g;
    Tensor ids = g.input("ids." + std::to_string(len), {1, len}, DType::i32);
    g.output("logits." + std::to_string(len),
             models::chargpt_cached(g, ids, g.input("position", {1}, DType::i32), max_context, c));
    programs.push_back(s.add(g));
  }
  copy_weights(weights, s);
  auto feed = [&](std::span<const int32_t> ids, int64_t position) {
    const std::string len = std::to_string(ids.size());
    s.set("ids." + len, ids);
    s.set("position", std::vector<int32_t>{int32_t(position)});
    s.run(programs[ids.size() == 1 ? 1 : 0]);
    return s.get("logits." + len);
  };
  Greedy r;
  r.take(feed(prompt, 0));
  for (int64_t position = int64_t(prompt.size()); int(r.tokens.size()) < n; ++position)
    r.take(feed(std::span<const int32_t>(&r.tokens.back(), 1), position));
  return r;
}

// f32 on both sides, different kernels and summation orders: the logits (of order ten) agree
// to about 3e-5 on the CPU and lavapipe; 2e-4 bounds the rounding, and every top-1 margin of
// the reference exceeds twice it (checked), so equal tokens are not luck.
constexpr double kTolerance = 2e-4;

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

// The generator's greedy tokens against the recomputed reference, both added to `s` (the
// weights set); `what` names the case.
void expect_equal(CharGptGenerator& gen, Recompute& ref, const std::string& prompt, const std::string& what) {
  const std::vector<int32_t>& ids = encode(prompt);
  const Greedy a = generate(gen, ids, kNew), r = ref.context_shift(ids, kNew, gen.keep());
  EXPECT_EQ(a.tokens, r.tokens) << what;
  const double worst = largest_difference(a, r, ids.size(), 0, SIZE_MAX);
  EXPECT_LT(worst, kTolerance) << what;
  EXPECT_GT(r.margin, 2 * kTolerance) << what;
  EXPECT_GE(gen.restarts(), 2) << what << ": the text never crossed the restart point twice";
  const std::set<int32_t> distinct(r.tokens.begin(), r.tokens.end());
  EXPECT_GT(distinct.size(), 3u) << what << ": the tokens hardly vary";
  std::printf(
      "%s: %d tokens after %zu, %lld restarts, %zu distinct; largest logit difference %.3g, "
      "smallest top-1 margin %.3g\n",
      what.c_str(), kNew, ids.size(), (long long)gen.restarts(), distinct.size(), worst, double(r.margin));
}

// Both prompts; then, for two blocks, the can-fail check: a sliding cached window agrees
// while the text fits seq tokens and not past it.
void expect_context_shift(Session& s, CharGptGenerator& gen, Recompute& ref, const std::string& what) {
  expect_equal(gen, ref, kShortPrompt, what + ", short prompt");
  expect_equal(gen, ref, kLongPrompt, what + ", prompt longer than seq");
  const models::CharGptConfig& c = ref.config;
  if (c.layers < 2) return;
  const std::vector<int32_t>& ids = encode(kShortPrompt);
  const Greedy w = sliding(s, c, ids, kNew), r = ref.context_shift(ids, kNew, gen.keep());
  const double inside = largest_difference(w, r, ids.size(), 0, size_t(c.seq) + 1);
  const double past = largest_difference(w, r, ids.size(), size_t(c.seq) + 1, SIZE_MAX);
  EXPECT_LT(inside, kTolerance) << what << ": texts of up to seq tokens are the same context both ways";
  EXPECT_GT(past, 1e-2) << what << ": a sliding window instead of restarts went unnoticed";
  std::printf("%s, sliding window: largest logit difference %.3g up to seq, %.3g past it\n", what.c_str(), inside,
              past);
}

TEST(CharGptGeneration, ContextShiftEqualsRecomputingOnRandomWeights) {
  for (int64_t layers : {1, 2}) {
    const models::CharGptConfig c = small_config(layers);
    Session s;
    Recompute ref(s, c);
    CharGptGenerator gen(s, c);
    EXPECT_EQ(gen.keep(), c.seq / 2);
    draw_weights(s, uint32_t(layers));
    expect_context_shift(s, gen, ref, std::to_string(layers) + " blocks, random weights");
  }
}

// The generator is added to the trainer's session after training, as `meganeura train` does:
// it finds the trained parameters by name.
TEST(CharGptGeneration, ContextShiftEqualsRecomputingAfterTraining) {
  for (int64_t layers : {1, 2}) {
    const models::CharGptConfig c = small_config(layers);
    auto t = trained(c);
    Recompute ref(t->session(), c);
    CharGptGenerator gen(t->session(), c);
    expect_context_shift(t->session(), gen, ref, std::to_string(layers) + " blocks, trained");
  }
}

// keep = seq - 1 restarts at every token once the text is seq long: the last seq tokens from
// position 0 every time, which is what the sampler recomputed before the caches.
TEST(CharGptGeneration, KeepingAllButOneIsTheLastWindowRecomputed) {
  const models::CharGptConfig c = small_config(2);
  Session s;
  Recompute ref(s, c);
  CharGptGenerator gen(s, c, c.seq - 1);
  draw_weights(s, 2);
  for (const std::string& prompt : {kShortPrompt, kLongPrompt}) {
    const Greedy a = generate(gen, encode(prompt), kNew), w = ref.last_window(encode(prompt), kNew);
    EXPECT_EQ(a.tokens, w.tokens) << prompt;
    EXPECT_LT(largest_difference(a, w, encode(prompt).size(), 0, SIZE_MAX), kTolerance) << prompt;
  }
}

TEST(CharGptGeneration, BadArgumentsAreRefused) {
  const models::CharGptConfig c = small_config(1);
  Session s;
  EXPECT_THROW(CharGptGenerator(s, c, c.seq), std::invalid_argument);
  EXPECT_THROW(CharGptGenerator(s, c, -1, 24), std::invalid_argument);  // not a power of two
  CharGptGenerator gen(s, c);
  s.initialise();
  EXPECT_THROW(gen.next(0), std::logic_error);  // before start
  EXPECT_THROW(gen.start({}), std::invalid_argument);
  EXPECT_THROW(gen.start(std::vector<int32_t>{int32_t(c.vocab)}), std::invalid_argument);
  gen.start(encode(kShortPrompt));
  const std::vector<int32_t> before = gen.context();
  EXPECT_THROW(gen.next(-1), std::invalid_argument);
  EXPECT_EQ(gen.context(), before) << "a refused token changed the context";
}

// Vulkan against the CPU reference, one and two blocks on random weights and two blocks
// trained (on the CPU): the same greedy tokens; every program (the decode step and the
// restarts' prompt chunks) is recorded on its first run and replayed after that.
TEST(CharGptGeneration, VulkanContextShiftEqualsTheCpuReferenceAndRecordsOnce) {
  MEGANEURA_REQUIRE_VULKAN();
  for (const auto& [layers, train] : {std::pair{1, false}, std::pair{2, false}, std::pair{2, true}}) {
    const models::CharGptConfig c = small_config(layers);
    const std::string what = std::to_string(layers) + " blocks, " + (train ? "trained" : "random weights");
    Session cpu;
    std::unique_ptr<Trainer> t;
    Session* weights = &cpu;
    if (train) {
      t = trained(c);
      weights = &t->session();
    }
    Recompute ref(*weights, c);
    if (!train) draw_weights(cpu, uint32_t(layers));
    Session gpu(testing_vulkan::vulkan_options());
    CharGptGenerator gen(gpu, c);
    copy_weights(*weights, gpu);
    expect_equal(gen, ref, kShortPrompt, "Vulkan, " + what);
    // Again, past the first restart before counting: nothing more is recorded through the
    // following restarts.
    const std::vector<int32_t>& ids = encode(kShortPrompt);
    Greedy a;
    a.take(gen.start(ids));
    while (gen.restarts() < 1 || a.tokens.size() < size_t(c.seq)) a.take(gen.next(a.tokens.back()));
    const uint64_t recordings = gpu.backend().stats().recordings;
    while (gen.restarts() < 4) a.take(gen.next(a.tokens.back()));
    EXPECT_EQ(gpu.backend().stats().recordings, recordings) << what << ": a decode step or restart recorded again";
  }
}

}  // namespace
}  // namespace meganeura
