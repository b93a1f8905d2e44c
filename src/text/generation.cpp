// Generation: the token loop shared by `meganeura generate` and meganeura.generate
// (text/generation.h).
#include "text/generation.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "text/gguf_tokenizer.h"
#include "text/utf8.h"

namespace meganeura::text {
namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

// `stop` with max_new_tokens 0 made "as many as fit", once the prompt is known to fit.
StopCriteria checked_criteria(const Generator& gen, std::span<const int32_t> prompt, StopCriteria stop) {
  if (prompt.empty()) throw std::invalid_argument("[generate] the prompt is empty: the model needs at least one token");
  const int64_t vocab = gen.config().vocab_size;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      throw std::invalid_argument("[generate] the prompt's token id " + std::to_string(prompt[i]) + " (at index " +
                                  std::to_string(i) + ") is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  if (gen.batch() != 1) throw std::invalid_argument("[generate] text generation needs a generator of batch 1");
  if (gen.position() != 0) throw std::invalid_argument("[generate] the generator holds a sequence: reset() it");
  const int64_t room = gen.max_context() - int64_t(prompt.size());
  if (room < 1 || stop.max_new_tokens < 0 || stop.max_new_tokens > room) {
    throw std::invalid_argument("[generate] the prompt's " + std::to_string(prompt.size()) +
                                " tokens and max_new_tokens " + std::to_string(stop.max_new_tokens) +
                                " do not fit max_context " + std::to_string(gen.max_context()));
  }
  if (stop.max_new_tokens == 0) stop.max_new_tokens = int(room);  // until the cache is full
  return stop;
}

}  // namespace

DType weights_dtype(const std::string& name, const std::filesystem::path& weights) {
  if (name == "f32") return DType::f32;
  if (name == "q8_0") return DType::q8_0;
  if (name == "q4_0") return DType::q4_0;
  if (name == "f16") return DType::f16;
  if (name == "bf16") return DType::bf16;
  if (name != "auto")
    throw std::invalid_argument("weights dtype '" + name + "': expected auto, f32, f16, bf16, q8_0 or q4_0");
  if (weights.extension() != ".gguf" || std::filesystem::is_directory(weights)) return DType::f32;
  // The file's format when every matrix is in it (an override to another type keeps f32).
  const io::GgufFile f = io::read_gguf(weights);
  std::optional<uint32_t> common;
  for (const io::GgufTensorInfo& t : f.tensors) {
    if (t.shape.size() != 2) continue;
    if (common && *common != t.type) return DType::f32;
    common = t.type;
  }
  return common == uint32_t(io::GgmlType::q8_0)   ? DType::q8_0
         : common == uint32_t(io::GgmlType::q4_0) ? DType::q4_0
                                                  : DType::f32;
}

std::vector<int> read_eos_token_ids(const std::filesystem::path& config) {
  if (config.extension() == ".gguf" && !std::filesystem::is_directory(config))
    return gguf_eos_token_ids(io::read_gguf(config));
  std::filesystem::path p = config;
  if (std::filesystem::is_directory(p)) p /= "config.json";
  std::ifstream f(p);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  std::vector<int> out;
  if (j.is_discarded() || !j.is_object() || !j.contains("eos_token_id")) return out;
  const nlohmann::json& e = j["eos_token_id"];
  for (const nlohmann::json& v : e.is_array() ? e : nlohmann::json::array({e}))
    if (v.is_number_integer()) out.push_back(v.get<int>());
  return out;
}

Generation::Generation(Generator& generator, std::vector<int32_t> prompt, const SamplingOptions& sampling,
                       StopCriteria stop, const Tokenizer* tokenizer)
    : gen_(generator),
      prompt_(std::move(prompt)),
      sampler_(sampling),
      stop_(checked_criteria(generator, prompt_, std::move(stop))),
      history_(prompt_.begin(), prompt_.end()),
      on_device_(sampling.temperature == 0 && sampling.repetition_penalty == 1),
      top_k_on_device_(sampling.temperature > 0 && sampling.repetition_penalty == 1 && sampling.top_k > 0 &&
                       generator.top_k() == sampling.top_k) {
  if (tokenizer != nullptr) decoder_.emplace(*tokenizer);
}

const std::vector<float>& Generation::logits() const {
  if (logits_ == nullptr) throw std::logic_error("[generate] no logits were read: call keep_logits() before step()");
  return *logits_;
}

bool Generation::step() {
  if (finished_) return false;
  const Clock::time_point t0 = Clock::now();
  const int32_t last = fresh_.empty() ? 0 : fresh_.back();
  const std::span<const int32_t> ids = fresh_.empty() ? std::span<const int32_t>(prompt_) : std::span(&last, 1);
  int next = 0;
  if (on_device_) {
    next = gen_.feed_greedy(ids)[0];
  } else if (top_k_on_device_) {
    const TopCandidates& top = gen_.feed_top_k(ids);
    logits_ = nullptr;
    const std::optional<int> drawn = sampler_.sample_top(top.logits, top.ids);
    if (drawn) {
      ++top_k_decided_;
      next = *drawn;
    } else {  // a tie at the k-th value: the full row decides
      logits_ = &gen_.read_logits();
      next = sampler_.sample(*logits_, history_);
    }
  } else {
    logits_ = &gen_.feed(ids);
    next = sampler_.sample(*logits_, history_);
  }
  history_.push_back(next);
  fresh_.push_back(next);
  const std::string piece = decoder_ ? decoder_->push(next) : (fresh_.size() > 1 ? " " : "") + std::to_string(next);
  const bool done = stop_.push(next, piece);
  if (done || gen_.position() >= gen_.max_context()) {
    finished_ = true;
    text_ = stop_.text();
    // The bytes of a character the tokens left unfinished.
    if (decoder_ && !stop_.stopped()) text_ += decoder_->finish();
  }
  (fresh_.size() == 1 ? prefill_ : decode_) += Clock::now() - t0;
  return true;
}

std::string_view Generation::released() const {
  if (finished_) return text_;
  // The decoder gives whole characters, but a held-back start of a stop string could begin
  // inside one (the stop strings are arbitrary bytes): whole characters only, so every piece a
  // caller takes is valid UTF-8.
  const std::string_view ready = stop_.ready();
  return ready.substr(0, ready.size() - utf8_incomplete_tail(ready));
}

GenerationStats Generation::stats() const {
  const double prefill_s = seconds(prefill_), decode_s = seconds(decode_);
  GenerationStats s;
  if (fresh_.empty()) return s;
  s.ttft_ms = prefill_s * 1e3;
  s.prefill_tokens_per_second = double(prompt_.size()) / prefill_s;
  s.decode_tokens_per_second = fresh_.size() > 1 ? double(fresh_.size() - 1) / decode_s : 0.0;
  return s;
}

}  // namespace meganeura::text
