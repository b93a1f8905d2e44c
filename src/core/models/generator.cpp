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

// f16 and bf16 weights are the plan's storage (SessionOptions::weights_dtype): the graph stays f32.
SessionOptions session_of(const GeneratorOptions& o) {
  SessionOptions so = o.session;
  if (o.weights == DType::f16 || o.weights == DType::bf16) so.weights_dtype = o.weights;
  return so;
}

}  // namespace

Generator::Generator(models::LlamaConfig config, const GeneratorOptions& o)
    : config_(std::move(config)),
      batch_(o.batch),
      max_context_(context_of(config_, o)),
      top_k_(o.top_k),
      session_(session_of(o)),
      positions_(size_t(std::max<int64_t>(o.batch, 1)), 0),
      logits_(size_t(std::max<int64_t>(o.batch, 1) * config_.vocab_size), 0.0f),
      next_(size_t(std::max<int64_t>(o.batch, 1)), 0),
      last_finished_(size_t(std::max<int64_t>(o.batch, 1)), false) {
  if (o.batch <= 0) throw std::invalid_argument("[generate] batch must be positive, got " + std::to_string(o.batch));
  if (o.top_k < 0 || o.top_k >= std::min<int64_t>(1024, config_.vocab_size)) {
    throw std::invalid_argument("[generate] top_k must be in [0, " +
                                std::to_string(std::min<int64_t>(1023, config_.vocab_size - 1)) + "], got " +
                                std::to_string(o.top_k));
  }
  top_.count = top_k_ + 1;
  top_.logits.assign(size_t(batch_ * top_.count), 0.0f);
  top_.ids.assign(size_t(batch_ * top_.count), 0);
  if (o.prefill_chunk <= 0 || !std::has_single_bit(uint64_t(o.prefill_chunk))) {
    throw std::invalid_argument("[generate] prefill_chunk must be a power of two, got " +
                                std::to_string(o.prefill_chunk));
  }
  for (int64_t n = std::min<int64_t>(o.prefill_chunk, int64_t(std::bit_floor(uint64_t(max_context_)))); n >= 1;
       n /= 2) {
    Chunk c{n, 0, Graph{}};
    Tensor logits = models::build_llama_cached(c.graph, config_, batch_, n, max_context_,
                                               dtype_is_block(o.weights) ? o.weights : DType::f32);
    c.graph.output("logits." + std::to_string(n), logits);
    c.graph.output("argmax." + std::to_string(n), argmax(logits));
    if (top_k_ > 0) c.graph.output("top_k." + std::to_string(n), top_k_packed(logits, top_k_ + 1));
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

std::vector<std::pair<int64_t, size_t>> Generator::programs() const {
  std::vector<std::pair<int64_t, size_t>> out;
  for (const Chunk& c : chunks_) out.emplace_back(c.tokens, c.program);
  return out;
}

std::vector<std::vector<int32_t>> Generator::split(std::span<const int32_t> ids) const {
  if (ids.empty() || int64_t(ids.size()) % batch_ != 0) {
    throw std::invalid_argument("[generate] feed takes " + std::to_string(batch_) +
                                " rows of at least one token, got " + std::to_string(ids.size()) + " ids");
  }
  const size_t n = ids.size() / size_t(batch_);
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(batch_));
  for (size_t b = 0; b < rows.size(); ++b) rows[b].assign(ids.begin() + long(b * n), ids.begin() + long((b + 1) * n));
  return rows;
}

const std::vector<float>& Generator::feed(std::span<const int32_t> ids) { return feed_each(split(ids)); }

const std::vector<int32_t>& Generator::feed_greedy(std::span<const int32_t> ids) { return greedy_each(split(ids)); }

void Generator::check(std::span<const std::vector<int32_t>> rows) const {
  if (int64_t(rows.size()) != batch_) {
    throw std::invalid_argument("[generate] feed_each takes a row per sequence (" + std::to_string(batch_) + "), got " +
                                std::to_string(rows.size()));
  }
  for (size_t b = 0; b < rows.size(); ++b) {
    const std::string who = batch_ > 1 ? "sequence " + std::to_string(b) + ": " : "";
    for (int32_t id : rows[b]) {
      if (id < 0 || id >= config_.vocab_size) {
        throw std::invalid_argument("[generate] " + who + "token id " + std::to_string(id) +
                                    " is outside the vocabulary [0, " + std::to_string(config_.vocab_size) + ")");
      }
    }
    if (positions_[b] + int64_t(rows[b].size()) > max_context_) {
      throw std::invalid_argument("[generate] " + who + std::to_string(rows[b].size()) + " more tokens at position " +
                                  std::to_string(positions_[b]) +
                                  " would pass max_context = " + std::to_string(max_context_));
    }
  }
}

const std::vector<float>& Generator::feed_each(std::span<const std::vector<int32_t>> rows) {
  feed_rows(rows, Read::logits);
  return logits_;
}

const std::vector<int32_t>& Generator::greedy_each(std::span<const std::vector<int32_t>> rows) {
  feed_rows(rows, Read::argmax);
  return next_;
}

const TopCandidates& Generator::feed_top_k(std::span<const int32_t> ids) { return top_k_each(split(ids)); }

const TopCandidates& Generator::top_k_each(std::span<const std::vector<int32_t>> rows) {
  if (top_k_ == 0) throw std::logic_error("[generate] feed_top_k needs a generator built with top_k > 0");
  feed_rows(rows, Read::top_k);
  return top_;
}

const std::vector<float>& Generator::read_logits() {
  if (last_tokens_ == 0) throw std::logic_error("[generate] read_logits: nothing has run yet");
  const std::vector<float> logits = session_.get("logits." + std::to_string(last_tokens_));
  const size_t vocab = size_t(config_.vocab_size);
  for (size_t b = 0; b < last_finished_.size(); ++b)
    if (last_finished_[b]) std::copy_n(logits.begin() + long(b * vocab), vocab, logits_.begin() + long(b * vocab));
  return logits_;
}

void Generator::feed_rows(std::span<const std::vector<int32_t>> rows, Read read) {
  check(rows);
  std::vector<int64_t> done(size_t(batch_), 0);
  while (true) {
    // The longest chunk every sequence with tokens left can take whole.
    int64_t n = INT64_MAX;
    for (size_t b = 0; b < rows.size(); ++b)
      if (done[b] < int64_t(rows[b].size())) n = std::min(n, int64_t(rows[b].size()) - done[b]);
    if (n == INT64_MAX) return;
    run_chunk(*std::find_if(chunks_.begin(), chunks_.end(), [&](const Chunk& k) { return k.tokens <= n; }), rows, done,
              read);
  }
}

void Generator::run_chunk(const Chunk& c, std::span<const std::vector<int32_t>> rows, std::vector<int64_t>& done,
                          Read read) {
  std::vector<int32_t> ids(size_t(batch_ * c.tokens), 0), at(size_t(batch_), -1);  // -1: sits it out
  std::vector<bool> takes(static_cast<size_t>(batch_));
  for (size_t b = 0; b < rows.size(); ++b) {
    takes[b] = done[b] < int64_t(rows[b].size());
    if (!takes[b]) continue;
    std::copy_n(rows[b].begin() + done[b], c.tokens, ids.begin() + int64_t(b) * c.tokens);
    at[b] = int32_t(positions_[b]);
  }
  const std::string n = std::to_string(c.tokens);
  session_.set("input_ids." + n, std::span<const int32_t>(ids));
  session_.set("position", std::span<const int32_t>(at));
  session_.run(c.program);
  std::vector<float> logits, top;
  std::vector<int32_t> best(static_cast<size_t>(batch_));
  if (read == Read::logits)
    logits = session_.get("logits." + n);
  else if (read == Read::argmax)
    session_.read_raw("argmax." + n, std::as_writable_bytes(std::span(best)));
  else
    top = session_.get("top_k." + n);  // per sequence: the values, then the ids as floats
  const size_t vocab = size_t(config_.vocab_size), k = size_t(top_.count);
  last_tokens_ = c.tokens;
  for (size_t b = 0; b < rows.size(); ++b) {
    last_finished_[b] = false;
    if (!takes[b]) continue;
    positions_[b] += c.tokens;
    done[b] += c.tokens;
    if (done[b] != int64_t(rows[b].size())) continue;
    last_finished_[b] = true;
    if (read == Read::logits) {
      std::copy_n(logits.begin() + long(b * vocab), vocab, logits_.begin() + long(b * vocab));
    } else if (read == Read::argmax) {
      next_[b] = best[b];
    } else {
      for (size_t j = 0; j < k; ++j) {
        top_.logits[b * k + j] = top[b * 2 * k + j];
        top_.ids[b * k + j] = int32_t(top[b * 2 * k + k + j]);
      }
    }
  }
}

}  // namespace meganeura
