// LlamaConfig from a Hugging Face config.json (meganeura/llama.h).
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "meganeura/llama.h"
#include "models/gguf_model.h"

namespace meganeura::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Largest accepted size of any one dimension (vocabulary, width, layers, context): far above
// any published Llama (a 256k vocabulary, 128k context), far below what overflows a shape.
constexpr int64_t kMaxDimension = int64_t(1) << 24;

// Reads the fields of one JSON object; every error names the file and the field.
class Fields {
 public:
  Fields(const json& j, std::string source, std::string prefix = "")
      : j_(j), source_(std::move(source)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw ConfigError("[config] " + source_ + ": field '" + prefix_ + key + "' " + what);
  }
  const json* find(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  const json& need(const std::string& key) const {
    const json* v = find(key);
    if (!v) fail(key, "is missing");
    return *v;
  }
  // A positive integer (JSON integers only: 576, not 576.0 or "576").
  int64_t positive(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const {
    const json* v = find(key);
    if (!v && fallback) return *fallback;
    if (!v) fail(key, "is missing");
    if (!v->is_number_integer()) fail(key, "must be an integer, got " + v->dump());
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(kMaxDimension))
      fail(key, "is over the limit " + std::to_string(kMaxDimension) + ", got " + v->dump());
    if (v->get<int64_t>() <= 0) fail(key, "must be a positive integer, got " + v->dump());
    return v->get<int64_t>();
  }
  // A finite positive number.
  double number(const std::string& key, std::optional<double> fallback = std::nullopt) const {
    const json* v = find(key);
    if (!v && fallback) return *fallback;
    if (!v) fail(key, "is missing");
    if (!v->is_number()) fail(key, "must be a number, got " + v->dump());
    const double d = v->get<double>();
    if (!std::isfinite(d) || d <= 0) fail(key, "must be a positive number, got " + v->dump());
    return d;
  }
  bool boolean(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  std::optional<std::string> string(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) fail(key, "must be a string, got " + v->dump());
    return v->get<std::string>();
  }

 private:
  const json& j_;
  std::string source_, prefix_;
};

RopeScaling parse_rope_scaling(const json& j, const std::string& source) {
  RopeScaling r;
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return r;
  const Fields top(j, source);
  if (!it->is_object()) top.fail("rope_scaling", "must be null or an object, got " + it->dump());
  const Fields f(*it, source, "rope_scaling.");
  std::optional<std::string> type = f.string("rope_type");
  if (!type) type = f.string("type");
  if (!type) f.fail("rope_type", "is missing");
  if (*type == "default") return r;
  if (*type == "linear") {
    r.type = RopeScaling::Type::linear;
    r.factor = f.number("factor");
  } else if (*type == "llama3") {
    r.type = RopeScaling::Type::llama3;
    r.factor = f.number("factor");
    r.low_freq_factor = f.number("low_freq_factor");
    r.high_freq_factor = f.number("high_freq_factor");
    r.original_max_position_embeddings = f.positive("original_max_position_embeddings");
    if (r.high_freq_factor <= r.low_freq_factor)
      f.fail("high_freq_factor", "must exceed low_freq_factor (" + std::to_string(r.low_freq_factor) + ")");
  } else {
    f.fail("rope_type", "is '" + *type + "': only \"linear\" and \"llama3\" scaling are implemented");
  }
  return r;
}

// The architecture: Llama only (Qwen2 adds q/k/v biases, Mistral a sliding window, Gemma other
// norms and activations: each would build a different graph).
void check_architecture(const json& j, const Fields& f) {
  if (auto it = j.find("architectures"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || it->size() != 1 || !(*it)[0].is_string())
      f.fail("architectures", "must be a list of one class name, got " + it->dump());
    const std::string a = (*it)[0].get<std::string>();
    if (a != "LlamaForCausalLM")
      f.fail("architectures", "is '" + a + "': only LlamaForCausalLM checkpoints are supported");
  }
  if (auto t = f.string("model_type"); t && *t != "llama")
    f.fail("model_type", "is '" + *t + "': only \"llama\" is supported");
  if (auto act = f.string("hidden_act"); act && *act != "silu")
    f.fail("hidden_act", "is '" + *act + "': the Llama MLP is SwiGLU, \"silu\"");
  if (f.boolean("attention_bias", false)) f.fail("attention_bias", "is true: attention projections with biases");
  if (f.boolean("mlp_bias", false)) f.fail("mlp_bias", "is true: MLP projections with biases");
  if (f.boolean("rope_interleaved", false)) f.fail("rope_interleaved", "is true: rotary pairs are the two halves");
}

}  // namespace

LlamaConfig parse_llama_config(std::string_view text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw ConfigError("[config] " + source + " is not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw ConfigError("[config] " + source + " must hold a JSON object");
  const Fields f(j, source);
  check_architecture(j, f);
  LlamaConfig c;
  c.vocab_size = f.positive("vocab_size");
  c.hidden_size = f.positive("hidden_size");
  c.intermediate_size = f.positive("intermediate_size");
  c.num_hidden_layers = f.positive("num_hidden_layers");
  c.num_attention_heads = f.positive("num_attention_heads");
  c.num_key_value_heads = f.positive("num_key_value_heads", c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads)
    f.fail("num_key_value_heads", "(" + std::to_string(c.num_key_value_heads) + ") must divide num_attention_heads (" +
                                      std::to_string(c.num_attention_heads) + ")");
  if (!f.find("head_dim") && c.hidden_size % c.num_attention_heads)
    f.fail("head_dim", "is missing and hidden_size is not a multiple of num_attention_heads");
  c.head_dim = f.positive("head_dim", c.hidden_size / c.num_attention_heads);
  if (c.head_dim % 2) f.fail("head_dim", "must be even (rotary pairs), got " + std::to_string(c.head_dim));
  c.max_position_embeddings = f.positive("max_position_embeddings", 2048);
  c.rope_theta = f.number("rope_theta", 10000.0);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.rope_scaling = parse_rope_scaling(j, source);
  return c;
}

LlamaConfig read_llama_config(const fs::path& path_in) {
  if (is_gguf(path_in)) return llama_config_from_gguf(path_in);
  const fs::path path = fs::is_directory(path_in) ? path_in / "config.json" : path_in;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("[config] cannot open " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return parse_llama_config(text.str(), path.string());
}

LlamaConfig smollm2_135m_config() {
  // HuggingFaceTB/SmolLM2-135M config.json.
  LlamaConfig c;
  c.vocab_size = 49152;
  c.hidden_size = 576;
  c.intermediate_size = 1536;
  c.num_hidden_layers = 30;
  c.num_attention_heads = 9;
  c.num_key_value_heads = 3;
  c.head_dim = 64;
  c.max_position_embeddings = 8192;
  c.rope_theta = 100000;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = true;
  return c;
}

RopeAttrs llama_rope_attrs(const LlamaConfig& c) {
  RopeAttrs a;
  a.theta = c.rope_theta;
  if (c.rope_scaling.type != RopeScaling::Type::none) a.factor = c.rope_scaling.factor;
  if (c.rope_scaling.type == RopeScaling::Type::llama3) {
    a.low_freq_factor = c.rope_scaling.low_freq_factor;
    a.high_freq_factor = c.rope_scaling.high_freq_factor;
    a.original_max_position = c.rope_scaling.original_max_position_embeddings;
  }
  return a;
}

}  // namespace meganeura::models
