// text::Generation (text/generation.h) with top-k sampling: drawing from the candidates the
// model's device finds (Generator::feed_top_k) gives the tokens drawing from the full rows
// gives, on the CPU backend and on Vulkan (lavapipe in CI), and decides almost every token
// from the candidates alone.
#include "text/generation.h"

#include <gtest/gtest.h>

#include <vector>

#include "vulkan_test_util.h"

namespace meganeura::text {
namespace {

models::LlamaConfig small_config() {
  models::LlamaConfig c;
  c.vocab_size = 300;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 128;
  c.tie_word_embeddings = true;
  return c;
}

struct Run {
  std::vector<int> tokens;
  int64_t decided = 0;
};

Run generate(const SessionOptions& session, const SamplingOptions& sampling, bool on_device) {
  const models::LlamaConfig c = small_config();
  Generator gen(c, {.max_context = 96,
                    .prefill_chunk = 8,
                    .top_k = on_device ? device_top_k(sampling, c.vocab_size) : 0,
                    .session = session});
  gen.initialise_weights();  // from the session's seed: the same weights for both runs
  Generation run(gen, {5, 17, 230, 99, 4, 61}, sampling, {.max_new_tokens = 48});
  while (run.step()) {
  }
  return {run.new_tokens(), run.top_k_decided()};
}

void same_tokens(const SessionOptions& session) {
  for (const SamplingOptions& o :
       {SamplingOptions{0.8f, 8, 0.95f, 0.0f, 1.0f, 3}, SamplingOptions{1.3f, 40, 1.0f, 0.02f, 1.0f, 4}}) {
    const Run device = generate(session, o, true), full = generate(session, o, false);
    EXPECT_EQ(device.tokens, full.tokens) << "top_k " << o.top_k;
    EXPECT_EQ(device.tokens.size(), 48u);
    EXPECT_GE(device.decided, 46) << "top_k " << o.top_k;  // a tie at the k-th value is rare
    EXPECT_EQ(full.decided, 0);
  }
  // With a repetition penalty the candidates cannot decide: the generator is built without them.
  EXPECT_EQ(device_top_k({0.8f, 8, 1.0f, 0.0f, 1.1f, 3}, 300), 0);
  EXPECT_EQ(device_top_k({0.8f, 300, 1.0f, 0.0f, 1.0f, 3}, 300), 0);
  EXPECT_EQ(device_top_k({0.0f, 8, 1.0f, 0.0f, 1.0f, 3}, 300), 0);  // greedy: the device's argmax
}

TEST(Generation, TopKFromTheDeviceEqualsTopKFromTheFullRows) { same_tokens({}); }

TEST(Generation, VulkanTopKFromTheDeviceEqualsTopKFromTheFullRows) {
  MEGANEURA_REQUIRE_VULKAN();
  same_tokens(testing_vulkan::vulkan_options());
}

}  // namespace
}  // namespace meganeura::text
