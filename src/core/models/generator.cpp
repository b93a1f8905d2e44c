// Generator: prompt chunks and decode steps through build_llama_cached's programs in one
// session (meganeura/generate.h).
#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

#include "meganeura/generate.h"
#include "meganeura/weights.h"

namespace meganeura {
namespace {

int64_t context_of(const models::LlamaConfig& c, const GeneratorOptions& o) {
  const int64_t n = o.max_context > 0 ? o.max_context : std::min<int64_t>(c.max_position_embeddings, 2048);
  if (n > c.max_position_embeddings) {
    throw std::invalid_argument(
        "[generate] max_context " + std::to_string(n) +
        " exceeds the model's max_position_embeddings = " + std::to_string(c.max_position_embeddings));
  }
  return n;
}

}  // namespace

Generator::Generator(models::LlamaConfig config, const GeneratorOptions& o)
    : config_(std::move(config)), batch_(o.batch), max_context_(context_of(config_, o)), session_(o.session) {
  if (o.batch <= 0) throw std::invalid_argument("[generate] batch must be positive, got " + std::to_string(o.batch));
  if (o.prefill_chunk <= 0 || !std::has_single_bit(uint64_t(o.prefill_chunk))) {
    throw std::invalid_argument("[generate] prefill_chunk must be a power of two, got " +
                                std::to_string(o.prefill_chunk));
  }
  for (int64_t n = std::min<int64_t>(o.prefill_chunk, int64_t(std::bit_floor(uint64_t(max_context_)))); n >= 1;
       n /= 2) {
    Chunk c{n, 0, Graph{}};
    c.graph.output("logits." + std::to_string(n),
                   models::build_llama_cached(c.graph, config_, batch_, n, max_context_));
    c.program = session_.add(c.graph);
    chunks_.push_back(std::move(c));
  }
}

size_t Generator::load_weights(const std::filesystem::path& path) {
  size_t loaded = 0;
  for (const Chunk& c : chunks_) loaded = std::max(loaded, load_parameters(session_, c.graph, path));
  return loaded;
}

void Generator::initialise_weights() { session_.initialise(); }

const std::vector<float>& Generator::feed(std::span<const int32_t> ids) {
  if (ids.empty() || int64_t(ids.size()) % batch_ != 0) {
    throw std::invalid_argument("[generate] feed takes " + std::to_string(batch_) +
                                " rows of at least one token, got " + std::to_string(ids.size()) + " ids");
  }
  const int64_t n = int64_t(ids.size()) / batch_;
  for (int32_t id : ids) {
    if (id < 0 || id >= config_.vocab_size) {
      throw std::invalid_argument("[generate] token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                  std::to_string(config_.vocab_size) + ")");
    }
  }
  if (position_ + n > max_context_) {
    throw std::invalid_argument("[generate] " + std::to_string(n) + " more tokens at position " +
                                std::to_string(position_) +
                                " would pass max_context = " + std::to_string(max_context_));
  }
  for (int64_t done = 0; done < n;) {
    const Chunk& c =
        *std::find_if(chunks_.begin(), chunks_.end(), [&](const Chunk& k) { return k.tokens <= n - done; });
    run_chunk(c, ids, done, n);
    done += c.tokens;
  }
  return logits_;
}

void Generator::run_chunk(const Chunk& c, std::span<const int32_t> ids, int64_t offset, int64_t length) {
  std::vector<int32_t> rows(size_t(batch_ * c.tokens));
  for (int64_t b = 0; b < batch_; ++b)
    std::copy_n(ids.begin() + b * length + offset, c.tokens, rows.begin() + b * c.tokens);
  session_.set("input_ids." + std::to_string(c.tokens), std::span<const int32_t>(rows));
  session_.set("position", std::vector<int32_t>{int32_t(position_)});
  session_.run(c.program);
  position_ += c.tokens;
  logits_ = session_.get("logits." + std::to_string(c.tokens));
}

}  // namespace meganeura
