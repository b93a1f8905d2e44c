// Autoregressive generation with a Llama-architecture model (meganeura/llama.h) through
// per-layer key/value caches. One session holds the programs of build_llama_cached for one
// token (decode) and for prompt chunks of 2, 4, ..., prefill_chunk tokens; they share the
// weights, the caches and the position input by name, so memory is planned once, and the decode
// program is recorded once and replayed for every token. Sampling, stop criteria and text
// belong to the caller (meganeura/text: Sampler, StopChecker, Tokenizer).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <span>
#include <utility>
#include <vector>

#include "meganeura/llama.h"
#include "meganeura/models.h"
#include "meganeura/session.h"

namespace meganeura {

struct GeneratorOptions {
  int64_t batch = 1;            // sequences decoded together, each at its own position
  int64_t max_context = 0;      // cache positions; 0: min(max_position_embeddings, 2048)
  int64_t prefill_chunk = 128;  // the longest prompt chunk one run takes (a power of two)
  // > 0: the programs also find each sequence's top_k + 1 largest next-token logits where the
  // model runs (feed_top_k), for top-k sampling without reading the vocabulary rows back; one
  // more than top_k tells whether the k-th value is tied. At most 1023.
  int64_t top_k = 0;
  // f32, or q8_0 / q4_0: every matrix (the embedding, the projections, the head) held in that
  // block format and decoded where it is read (matmul_q, on the CPU and Vulkan): 34 or 18 bytes per
  // 32 weights instead of 128. Weights from f32 files are quantised as they are set; a GGUF
  // file's blocks of the same format are kept as they are. f16 or bf16: the matrices held in
  // 16 bits (SessionOptions::weights_dtype), rounded to nearest even as they are set.
  DType weights = DType::f32;
  SessionOptions session;
};

// Each sequence's top_k + 1 largest next-token logits, largest first (the lower id first on
// ties, NaN above every number), and their ids: [batch, top_k + 1] each, row-major.
struct TopCandidates {
  int64_t count = 0;  // per sequence: top_k + 1
  std::vector<float> logits;
  std::vector<int32_t> ids;
};

class Generator {
 public:
  // Throws std::invalid_argument for options that do not fit the config.
  explicit Generator(models::LlamaConfig config, const GeneratorOptions& options = {});

  // Loads the model's parameters by name (meganeura/weights.h: a safetensors file, an index,
  // or a directory); the caches are not read. Returns the number of tensors loaded.
  size_t load_weights(const std::filesystem::path& path);
  // Random weights (the builders' initialisation, from the session's seed).
  void initialise_weights();

  // Appends `ids` (batch rows of equal length, row-major) to the sequences, in chunks of at most
  // prefill_chunk tokens, and returns the next-token logits [batch, vocab_size]. Throws
  // std::invalid_argument, leaving the sequences as they were, when an id is out of the
  // vocabulary or the tokens would pass max_context.
  const std::vector<float>& feed(std::span<const int32_t> ids);
  // The same with tokens of any number per sequence: rows[b] is appended to sequence b (an empty
  // row leaves it as it is). Sequences at different positions run together in the same
  // programs; a sequence with nothing left to take sits a chunk out (position -1: it writes no
  // cache row). A row of logits changes only for a sequence that took tokens.
  const std::vector<float>& feed_each(std::span<const std::vector<int32_t>> rows);
  // The same, returning each sequence's greedy choice, the argmax of its next-token logits
  // (the first, on ties), computed where the model runs: only `batch` ids come back, not the
  // vocabulary rows (logits() is not updated).
  const std::vector<int32_t>& feed_greedy(std::span<const int32_t> ids);
  const std::vector<int32_t>& greedy_each(std::span<const std::vector<int32_t>> rows);
  // The same, returning each sequence's top candidates (GeneratorOptions::top_k > 0, else
  // std::logic_error); logits() is not updated, but read_logits() reads the full rows after.
  const TopCandidates& feed_top_k(std::span<const int32_t> ids);
  const TopCandidates& top_k_each(std::span<const std::vector<int32_t>> rows);
  // After feed_greedy or feed_top_k: reads back the logits of the sequences the last run
  // finished (a sampler's fall-back when the candidates do not decide) and returns logits().
  const std::vector<float>& read_logits();
  int64_t top_k() const { return top_k_; }
  // Forgets the sequences, or one: the next feed starts it at position 0 (the cache rows beyond
  // a sequence's position are never read, so nothing of a previous sequence is seen).
  void reset() { std::fill(positions_.begin(), positions_.end(), 0); }
  void reset(int64_t sequence) { positions_.at(size_t(sequence)) = 0; }

  // The first sequence's position (every sequence's when they are always fed together).
  int64_t position() const { return positions_.front(); }
  int64_t position(int64_t sequence) const { return positions_.at(size_t(sequence)); }
  int64_t max_context() const { return max_context_; }
  int64_t batch() const { return batch_; }
  // The session's programs as (tokens per sequence, program index): prompt chunks, longest
  // first, then the one-token decode program.
  std::vector<std::pair<int64_t, size_t>> programs() const;
  const models::LlamaConfig& config() const { return config_; }
  Session& session() { return session_; }
  const Session& session() const { return session_; }

 private:
  struct Chunk {
    int64_t tokens;
    size_t program;
    Graph graph;
  };
  void check(std::span<const std::vector<int32_t>> rows) const;
  enum class Read { logits, argmax, top_k };  // what a run reads back
  std::vector<std::vector<int32_t>> split(std::span<const int32_t> ids) const;
  void feed_rows(std::span<const std::vector<int32_t>> rows, Read read);
  void run_chunk(const Chunk& c, std::span<const std::vector<int32_t>> rows, std::vector<int64_t>& done, Read read);

  models::LlamaConfig config_;
  int64_t batch_, max_context_, top_k_;
  Session session_;
  std::vector<Chunk> chunks_;       // longest first
  std::vector<int64_t> positions_;  // per sequence
  std::vector<float> logits_;
  std::vector<int32_t> next_;  // per sequence: the argmax of its logits, when read
  TopCandidates top_;          // per sequence: its top candidates, when read
  int64_t last_tokens_ = 0;    // the last run's chunk, and the sequences whose rows it finished
  std::vector<bool> last_finished_;
};

// The built-in character transformer (models::chargpt_cached) generating text of any length
// by context shift, as llama.cpp-style engines handle a full context. The caches hold
// config.seq positions, the longest context training saw, and every context starts at position
// 0 as training windows do. When a token would go to position seq, the context restarts: the
// last `keep` tokens before it and the token itself are fed again from position 0, so the
// context always holds between keep + 1 and seq tokens once it has filled. Greedy tokens and
// logits equal, up to rounding, recomputing models::chargpt over the tokens since the last
// restart for every token. A prompt is taken as if it had been generated: the context after it
// is the tail that restarting token by token leaves (all of it up to seq tokens, otherwise its
// last keep + 1 + (length - seq - 1) mod (seq - keep)), so the text that follows a prompt does
// not depend on where the prompt ends and generation began.
class CharGptGenerator {
 public:
  // Half the window. On the default model trained 300 steps, the mean loss per character past
  // the first 64 of the built-in text (teacher-forced) was 0.0225 keeping 32 tokens (0.0268
  // keeping 16, 0.0257 keeping 48), against 0.0588 recomputing the last 64 for every token
  // (what keep = seq - 1 amounts to) and 0.2606 with a cached window sliding over the whole
  // text. A restart every seq - keep tokens feeds keep + 1 tokens again: with 32, about one
  // more token fed per new token.
  static int64_t default_keep(const models::CharGptConfig& c) { return c.seq / 2; }

  // Adds the programs (prompt chunks of 1, 2, 4, ... up to min(prefill_chunk, seq) tokens and
  // the one-token decode step) to `session`, whose parameters they share by name (a trainer's
  // session, or one the weights are loaded into). keep < 0 takes default_keep; otherwise
  // 0 <= keep < config.seq. Throws std::invalid_argument for other values.
  CharGptGenerator(Session& session, const models::CharGptConfig& config, int64_t keep = -1,
                   int64_t prefill_chunk = 64);

  // Starts a text with `prompt` (at least one token) and returns the next-token logits [vocab].
  const std::vector<float>& start(std::span<const int32_t> prompt);
  // Appends one token (restarting the context when it is full) and returns the next logits.
  const std::vector<float>& next(int32_t token);

  int64_t keep() const { return keep_; }
  const std::vector<int32_t>& context() const { return context_; }  // the tokens in the caches
  int64_t restarts() const { return restarts_; }                    // since start

 private:
  void check(std::span<const int32_t> ids) const;
  void feed(std::span<const int32_t> ids, int64_t position);
  struct Chunk {
    int64_t tokens;
    size_t program;
  };
  Session& session_;
  models::CharGptConfig config_;
  int64_t keep_;
  std::vector<Chunk> chunks_;  // longest first
  std::vector<int32_t> context_;
  int64_t restarts_ = 0;
  std::vector<float> logits_;
};

}  // namespace meganeura
