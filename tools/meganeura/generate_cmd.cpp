// meganeura generate: text from a Llama-architecture checkpoint (config.json + safetensors, or
// a GGUF file) through the key/value cache (meganeura/generate.h), a Hugging Face tokenizer.json and the
// token loop that meganeura.generate shares (text/generation.h). Streams the text to stdout as
// it comes; --json prints one object instead.
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "meganeura/generate.h"
#include "meganeura/gguf.h"
#include "text/generation.h"
#include "text/tokenizer.h"
#include "workload_run.h"

namespace meganeura::cli {
namespace {

struct GenerateArgs {
  std::string gguf, config, weights, tokenizer, prompt, prompt_ids, device = "cpu", dump, weights_dtype = "auto";
  bool random_weights = false, json = false, ignore_eos = false;
  int64_t max_context = 0, prefill_chunk = 128;
  int threads = 0;
  uint64_t seed = 0;
  text::SamplingOptions sampling{.temperature = float(text::kGenerateTemperature)};
  text::StopCriteria stop{.max_new_tokens = text::kGenerateMaxNewTokens};
};

// The prompt's ids: --prompt through the tokenizer (no special tokens added), or --prompt-ids.
std::vector<int32_t> prompt_ids(const GenerateArgs& a, const text::Tokenizer* tok, int64_t vocab) {
  if (!a.prompt_ids.empty() && !a.prompt.empty())
    throw std::invalid_argument("give --prompt or --prompt-ids, not both");
  std::vector<int32_t> ids;
  if (!a.prompt_ids.empty()) {
    ids = parse_token_ids(a.prompt_ids, "--prompt-ids", vocab);
  } else {
    if (tok == nullptr) throw std::invalid_argument("--prompt needs --tokenizer (or give --prompt-ids)");
    const std::vector<int> e = tok->encode(a.prompt);
    ids.assign(e.begin(), e.end());
  }
  if (ids.empty()) throw std::invalid_argument("the prompt is empty: the model needs at least one token");
  return ids;
}

// Writes what the generation has released since the last call (text mode, not --json).
class Streamer {
 public:
  explicit Streamer(bool on) : on_(on) {}
  void flush(std::string_view released) {
    if (!on_ || released.size() <= written_) return;
    std::cout << released.substr(written_) << std::flush;
    written_ = released.size();
  }
  void finish(std::string_view text) {
    flush(text);
    if (on_) std::cout << "\n";
  }

 private:
  bool on_;
  size_t written_ = 0;
};

void print_report(const text::Generation& run, Generator& gen, bool has_text) {
  const text::GenerationStats s = run.stats();
  nlohmann::json j = {{"device", gen.session().device_name()},
                      {"prompt_tokens", run.prompt_tokens()},
                      {"new_tokens", run.new_tokens().size()},
                      {"tokens", run.new_tokens()},
                      {"text", has_text ? nlohmann::json(run.released()) : nlohmann::json(nullptr)},
                      {"ttft_ms", s.ttft_ms},
                      {"prefill_tokens_per_second", s.prefill_tokens_per_second},
                      {"decode_tokens_per_second", s.decode_tokens_per_second},
                      {"peak_rss_mb", double(peak_rss_bytes()) / (1 << 20)}};
  std::cout << j.dump() << "\n";
}

int run_generate(GenerateArgs a) {
  if (!a.gguf.empty()) {  // the config, the weights and the tokenizer from one file
    if (!a.config.empty() || !a.weights.empty())
      throw std::invalid_argument("--gguf holds the config and the weights: give neither --config nor --weights");
    a.config = a.weights = a.gguf;
    if (a.tokenizer.empty() && io::read_gguf(a.gguf).find("tokenizer.ggml.model")) a.tokenizer = a.gguf;
  }
  if (a.config.empty()) throw std::invalid_argument("give --config (or --gguf)");
  if (a.weights.empty() == !a.random_weights)
    throw std::invalid_argument("give --weights or --random-weights (one of them)");
  const models::LlamaConfig config = models::read_llama_config(a.config);
  std::optional<text::Tokenizer> tok;
  if (!a.tokenizer.empty()) tok = text::Tokenizer::from_file(a.tokenizer);
  const std::vector<int32_t> prompt = prompt_ids(a, tok ? &*tok : nullptr, config.vocab_size);
  if (a.sampling.seed == 0) a.sampling.seed = a.seed;
  text::validate(a.sampling);
  if (!a.ignore_eos)
    for (int id : text::read_eos_token_ids(a.config)) a.stop.stop_token_ids.push_back(id);

  SessionOptions so = base_session_options();
  so.device = parse_device(a.device);
  so.seed = a.seed;
  so.threads = a.threads;
  // Top-k sampling finds its candidates where the model runs, unless every row is dumped.
  const int64_t top_k = a.dump.empty() ? text::device_top_k(a.sampling, config.vocab_size) : 0;
  const DType weights = text::weights_dtype(a.weights_dtype, a.weights);
  Generator gen(config, {.max_context = a.max_context,
                         .prefill_chunk = a.prefill_chunk,
                         .top_k = top_k,
                         .weights = weights,
                         .session = so});
  // Checked here as well as by text::Generation, to name the options as they are spelled here.
  const int64_t room = gen.max_context() - int64_t(prompt.size());
  if (room < 1 || (a.stop.max_new_tokens > 0 && a.stop.max_new_tokens > room)) {
    throw std::invalid_argument("the prompt's " + std::to_string(prompt.size()) + " tokens and --max-new-tokens " +
                                std::to_string(a.stop.max_new_tokens) + " do not fit --max-context " +
                                std::to_string(gen.max_context()));
  }
  text::Generation run(gen, prompt, a.sampling, a.stop, tok ? &*tok : nullptr);
  if (!a.dump.empty()) run.keep_logits();
  if (a.random_weights)
    gen.initialise_weights();
  else
    gen.load_weights(a.weights);

  Streamer out(!a.json);
  std::vector<float> dumped;
  while (run.step()) {
    if (!a.dump.empty()) dumped.insert(dumped.end(), run.logits().begin(), run.logits().end());
    out.flush(run.released());
  }
  out.finish(run.released());
  if (!a.dump.empty()) {
    const int64_t rows = int64_t(run.new_tokens().size());
    write_dump(a.dump, {{"logits", {Shape{rows, config.vocab_size}, std::move(dumped)}}});
  }
  if (a.json) print_report(run, gen, tok.has_value());
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* c = app.add_subcommand("generate", "generate text from a Llama-architecture checkpoint (key/value cached)");
  c->add_option("--gguf", a->gguf, "a Llama GGUF file: config, weights and (when it has one) tokenizer");
  c->add_option("--config", a->config, "config.json, or the checkpoint directory holding it (or a .gguf file)");
  c->add_option("--weights", a->weights,
                "a .safetensors file, model.safetensors.index.json, a directory holding either, or a .gguf file");
  c->add_flag("--random-weights", a->random_weights, "random weights instead (benchmarks)");
  c->add_option("--tokenizer", a->tokenizer, "a Hugging Face tokenizer.json (byte-level BPE), or a .gguf file");
  c->add_option("--prompt", a->prompt, "text to continue (encoded without special tokens)");
  c->add_option("--prompt-ids", a->prompt_ids, "comma-separated token ids instead of --prompt");
  c->add_option("--max-new-tokens", a->stop.max_new_tokens,
                "tokens to generate (default 128; 0: until the cache is full)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--temperature", a->sampling.temperature, "0: greedy; default 0.7");
  c->add_option("--top-k", a->sampling.top_k, "keep the k most likely tokens (0: off)");
  c->add_option("--top-p", a->sampling.top_p, "keep the smallest set with this much probability (1: off)");
  c->add_option("--min-p", a->sampling.min_p, "drop tokens below this fraction of the top one (0: off)");
  c->add_option("--repetition-penalty", a->sampling.repetition_penalty, "divide seen tokens' logits (1: off)");
  c->add_option("--seed", a->seed, "seed of the draws (and of --random-weights)");
  c->add_option("--stop", a->stop.stop_strings, "stop before this text (repeatable)");
  c->add_option("--stop-id", a->stop.stop_token_ids, "stop after this token id (repeatable)");
  c->add_flag("--ignore-eos", a->ignore_eos, "do not stop at config.json's eos_token_id");
  c->add_option("--device", a->device, "cpu | vulkan | auto")->check(CLI::IsMember({"cpu", "vulkan", "auto"}));
  c->add_option("--max-context", a->max_context, "cache positions (default: max_position_embeddings, at most 2048)")
      ->check(CLI::PositiveNumber);
  c->add_option("--prefill-chunk", a->prefill_chunk, "longest prompt chunk per run, a power of two (default 128)")
      ->check(CLI::PositiveNumber);
  c->add_option("--weights-dtype", a->weights_dtype,
                "f32, f16, bf16, q8_0 or q4_0: hold every matrix in that format; auto: a GGUF file's type, else f32")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16", "q8_0", "q4_0"}));
  c->add_option("--threads", a->threads, "CPU threads (default: every core)")->check(CLI::NonNegativeNumber);
  c->add_flag("--json", a->json, "print one JSON object (tokens, text, timings, peak RSS) instead of the text");
  c->add_option("--dump-logits", a->dump, "safetensors file: the logits each new token was drawn from [new, vocab]");
  c->callback([a] { throw CLI::RuntimeError(run_generate(*a)); });
}

}  // namespace meganeura::cli
