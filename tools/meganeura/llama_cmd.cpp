// meganeura llama: one forward pass of a Hugging Face Llama checkpoint (config.json and
// safetensors weights, single or sharded) over given token ids; prints the next-token argmax
// as JSON and optionally dumps the logits.
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "meganeura/llama.h"
#include "meganeura/weights.h"
#include "workload_run.h"

namespace meganeura::cli {
namespace {

struct LlamaArgs {
  std::string config, weights, device = "cpu", dump;
  std::vector<std::string> ids;  // one comma-separated sequence per --input-ids
};

std::vector<int32_t> parse_ids(const std::vector<std::string>& seqs, const models::LlamaConfig& c, int64_t& seq) {
  std::vector<int32_t> out;
  seq = -1;
  for (const std::string& text : seqs) {
    const std::vector<int32_t> ids = parse_token_ids(text, "--input-ids", c.vocab_size);
    if (seq >= 0 && int64_t(ids.size()) != seq)
      throw std::invalid_argument("--input-ids: the sequences differ in length");
    seq = int64_t(ids.size());
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

int run_llama(const LlamaArgs& a) {
  const models::LlamaConfig c = models::read_llama_config(a.config);
  int64_t seq = 0;
  const std::vector<int32_t> ids = parse_ids(a.ids, c, seq);
  const int64_t batch = int64_t(a.ids.size());
  Graph g;
  g.output("logits", models::build_llama(g, c, batch, seq));
  SessionOptions so = base_session_options();
  so.device = parse_device(a.device);
  Session s(so);
  s.add(g);
  const size_t loaded = load_weights(s, g, a.weights);
  s.set("input_ids", std::span<const int32_t>(ids));
  s.run();
  const std::vector<float> logits = s.get("logits");
  nlohmann::json next = nlohmann::json::array();
  for (int64_t b = 0; b < batch; ++b) {
    const float* last = logits.data() + ((b + 1) * seq - 1) * c.vocab_size;
    next.push_back(std::max_element(last, last + c.vocab_size) - last);
  }
  if (!a.dump.empty()) write_dump(a.dump, {{"logits", {Shape{batch, seq, c.vocab_size}, logits}}});
  nlohmann::json out = {{"device", s.device_name()},
                        {"logits_shape", {batch, seq, c.vocab_size}},
                        {"next_token", next},
                        {"tensors_loaded", loaded}};
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace

std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& option, int64_t vocab) {
  std::vector<int32_t> out;
  std::stringstream in(text);
  std::string tok;
  while (std::getline(in, tok, ',')) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != tok.size() || v < 0 || v >= vocab) {
      throw std::invalid_argument(option + ": '" + tok + "' is not a token id in [0, " + std::to_string(vocab) + ")");
    }
    out.push_back(int32_t(v));
  }
  if (out.empty()) throw std::invalid_argument(option + ": an empty sequence");
  return out;
}

void add_llama_command(CLI::App& app) {
  auto a = std::make_shared<LlamaArgs>();
  CLI::App* c =
      app.add_subcommand("llama", "run a Hugging Face Llama checkpoint (config.json + safetensors) over token ids");
  c->add_option("--config", a->config, "config.json, or the checkpoint directory holding it")->required();
  c->add_option("--weights", a->weights,
                "a .safetensors file, model.safetensors.index.json, or a directory holding either")
      ->required();
  c->add_option("--input-ids", a->ids, "comma-separated token ids; repeat for a batch of equal lengths")->required();
  c->add_option("--device", a->device, "cpu | vulkan | auto")->check(CLI::IsMember({"cpu", "vulkan", "auto"}));
  c->add_option("--dump", a->dump, "safetensors file for the logits [batch, seq, vocab] (f32)");
  c->callback([a] { throw CLI::RuntimeError(run_llama(*a)); });
}

}  // namespace meganeura::cli
