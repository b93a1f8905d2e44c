// Token sampling for text generation, with the semantics of Hugging Face `generate`'s logits
// processors: repetition penalty, temperature, top-k, top-p, min-p, then a seeded draw.
// See docs/generation.md.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meganeura::text {

struct SamplingOptions {
  float temperature = 1.0f;         // 0: greedy (argmax, lowest index wins ties)
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off; in (0, 1]
  float min_p = 0.0f;               // 0: off; in [0, 1]
  float repetition_penalty = 1.0f;  // 1: off; > 0
  uint64_t seed = 0;
};

// Throws std::invalid_argument naming the option and its value.
void validate(const SamplingOptions& options);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);

  // The distribution the next token is drawn from (zeros for filtered tokens), in double.
  // For greedy decoding, one-hot on the argmax. Throws std::invalid_argument on NaN logits
  // or an out-of-range previous id.
  std::vector<double> probabilities(std::span<const float> logits, std::span<const int> previous) const;
  // The next token id.
  int sample(std::span<const float> logits, std::span<const int> previous);
  // The next token id from a row of top candidates (Generator::feed_top_k: the largest logits,
  // largest first, the lower id first on ties, NaN first, and their ids): the same token, from
  // the same draw, as sample() over the full row, where the candidates decide it: greedy, or
  // top_k in [1, candidates - 1] with the top_k-th value not tied with the next one, and no
  // repetition penalty. Otherwise nullopt, drawing nothing: call sample() with the full row.
  // Throws as sample() does on NaN (the candidates show it first) or all -inf logits.
  std::optional<int> sample_top(std::span<const float> logits, std::span<const int32_t> ids);

  const SamplingOptions& options() const { return options_; }

 private:
  double uniform();  // in [0, 1), the same on every platform
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

struct StopCriteria {
  int max_new_tokens = 0;  // 0: no limit
  std::vector<int> stop_token_ids;
  std::vector<std::string> stop_strings;
};

// Follows generated tokens and their decoded text (e.g. from StreamDecoder::push), which may
// split a stop string across several pushes. text() excludes the stop string and everything
// after it; text that might be the start of a stop string is held back in ready().
class StopChecker {
 public:
  explicit StopChecker(StopCriteria criteria);
  // Returns true when generation must stop (after this token).
  bool push(int token, std::string_view decoded);
  bool stopped() const { return stopped_; }
  // All text generated so far, cut before a stop string.
  const std::string& text() const { return text_; }
  // The prefix of text() that can no longer turn into a stop string.
  std::string_view ready() const;

 private:
  StopCriteria criteria_;
  std::string text_;
  int count_ = 0;
  bool stopped_ = false;
};

}  // namespace meganeura::text
