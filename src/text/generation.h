// The token loop of text generation over a meganeura::Generator (meganeura/generate.h): the
// prompt in one feed, then one token per step drawn by the Sampler, checked by the
// StopChecker and decoded by a StreamDecoder into text that is released only once it is valid
// UTF-8 and cannot turn into a stop string. `meganeura generate` and Python's
// meganeura.generate both run it, so they produce the same tokens, text and timings.
// See docs/generation.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meganeura/generate.h"
#include "text/sampling.h"
#include "text/tokenizer.h"

namespace meganeura::text {

// The defaults of `meganeura generate` and meganeura.generate (the sampler's own default
// temperature is Hugging Face's 1). A double, so that Python shows the default as 0.7.
inline constexpr double kGenerateTemperature = 0.7;
inline constexpr int kGenerateMaxNewTokens = 128;

// config.json's eos_token_id (an id or a list of them), or a .gguf file's
// tokenizer.ggml.eos_token_id; empty when the file has none. The file (or a directory holding
// config.json) is read leniently: read_llama_config checks it.
std::vector<int> read_eos_token_ids(const std::filesystem::path& config);

// The type a generator holds its matrices in (GeneratorOptions::weights): "f32", "q8_0",
// "q4_0", or "auto": a GGUF file's own format when every matrix in it is Q8_0 (or every one
// Q4_0), else f32. std::invalid_argument naming the value otherwise.
DType weights_dtype(const std::string& name, const std::filesystem::path& weights);

// The GeneratorOptions::top_k under which a Generation with these sampling options draws
// from the device's top candidates (top-k sampling, no repetition penalty, k below 1024 and
// the vocabulary), else 0.
inline int64_t device_top_k(const SamplingOptions& s, int64_t vocab_size) {
  const bool fits = s.top_k > 0 && s.top_k < 1024 && s.top_k < vocab_size;
  return s.temperature > 0 && s.repetition_penalty == 1 && fits ? s.top_k : 0;
}

// Speeds of a finished (or stopped) generation, as `meganeura generate --json` reports them.
struct GenerationStats {
  double ttft_ms = 0;                    // the prompt's run and the first draw
  double prefill_tokens_per_second = 0;  // prompt tokens over that time
  double decode_tokens_per_second = 0;   // each further token's run and draw; 0 with one token
};

class Generation {
 public:
  // Checks everything before the model runs: the prompt is not empty, its ids are in the
  // model's vocabulary, and it fits `generator`'s context with stop.max_new_tokens new tokens
  // (0: as many as fit); std::invalid_argument naming the value otherwise. `generator` must
  // start at position 0 and, like `tokenizer`, outlive this object; without a tokenizer the
  // text is the new ids in decimal, separated by spaces.
  Generation(Generator& generator, std::vector<int32_t> prompt, const SamplingOptions& sampling, StopCriteria stop,
             const Tokenizer* tokenizer = nullptr);

  // Runs the model on the prompt (first call) or the last new token and draws the next token.
  // Returns false, running nothing, once generation has finished.
  bool step();
  bool finished() const { return finished_; }

  // The text that may be shown so far, valid UTF-8: while running, the whole characters the
  // stop checker has released; once finished, the whole text (cut before a stop string, with any unfinished character's
  // bytes as U+FFFD). Each value extends the previous one.
  std::string_view released() const;
  // Greedy decoding without a repetition penalty takes each token as the model's argmax where
  // the model runs (Generator::feed_greedy), reading back one id instead of the vocabulary row,
  // unless logits are kept: call this before the first step to read them for logits().
  // Top-k sampling without a repetition penalty, on a generator built with the same top_k
  // (GeneratorOptions::top_k), draws from the top_k + 1 candidates found where the model runs
  // (Generator::feed_top_k), reading the full row only when the k-th value is tied: the same
  // tokens as from the full rows. keep_logits() turns both off.
  void keep_logits() { on_device_ = top_k_on_device_ = false; }
  // The tokens drawn from the device's candidates alone.
  int64_t top_k_decided() const { return top_k_decided_; }
  // The logits the last new token was drawn from [vocab_size], until the next step; throws
  // std::logic_error when the choice was made on the device (keep_logits).
  const std::vector<float>& logits() const;
  const std::vector<int>& new_tokens() const { return fresh_; }
  size_t prompt_tokens() const { return prompt_.size(); }
  GenerationStats stats() const;

 private:
  using Clock = std::chrono::steady_clock;
  Generator& gen_;
  std::vector<int32_t> prompt_;
  Sampler sampler_;
  StopChecker stop_;
  std::optional<StreamDecoder> decoder_;
  std::vector<int> history_, fresh_;
  const std::vector<float>* logits_ = nullptr;
  bool on_device_ = false;        // greedy choices by Generator::feed_greedy
  bool top_k_on_device_ = false;  // top-k candidates by Generator::feed_top_k
  int64_t top_k_decided_ = 0;
  std::string text_;  // the final text, once finished
  bool finished_ = false;
  Clock::duration prefill_{}, decode_{};  // time spent in step(), not the caller's between steps
};

}  // namespace meganeura::text
