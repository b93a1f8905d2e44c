// A Llama-architecture GGUF file (llama.cpp's layout) as a Hugging Face config and checkpoint:
// the hyperparameters from the llama.* keys, the tensors renamed to the Hugging Face names and
// decoded to f32, with the query and key projections' rows put back in the order the rotary
// embedding of the Hugging Face layout expects. See models/gguf_model.h.
#include "models/gguf_model.h"

#include <nlohmann/json.hpp>
#include <regex>

#include "meganeura/gguf.h"

namespace meganeura::models {
namespace {

namespace fs = std::filesystem;

const io::GgufValue& need(const io::GgufFile& f, const std::string& key) {
  const io::GgufValue* v = f.find(key);
  if (v == nullptr) throw ConfigError("[config] " + f.source.string() + ": GGUF key '" + key + "' is missing");
  return *v;
}
int64_t integer(const io::GgufFile& f, const std::string& key) {
  const std::optional<int64_t> v = need(f, key).integer();
  if (!v) throw ConfigError("[config] " + f.source.string() + ": GGUF key '" + key + "' is not an integer");
  return *v;
}
double number(const io::GgufFile& f, const std::string& key, double fallback) {
  const io::GgufValue* v = f.find(key);
  if (v == nullptr) return fallback;
  if (auto x = v->number()) return *x;
  if (auto x = v->integer()) return double(*x);
  throw ConfigError("[config] " + f.source.string() + ": GGUF key '" + key + "' is not a number");
}

// llama.cpp's names of a block's tensors, and Hugging Face's.
const std::pair<const char*, const char*> kBlockNames[] = {
    {"attn_norm", "input_layernorm"}, {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},   {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},    {"ffn_up", "mlp.up_proj"},         {"ffn_down", "mlp.down_proj"}};

// The Hugging Face name of a GGUF tensor, or "" for one the model does not use.
std::string hf_name(const std::string& gguf) {
  if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
  if (gguf == "output_norm.weight") return "model.norm.weight";
  if (gguf == "output.weight") return "lm_head.weight";
  static const std::regex block(R"(blk\.(\d+)\.([a-z_]+)\.weight)");
  std::smatch m;
  if (!std::regex_match(gguf, m, block)) return {};
  for (const auto& [from, to] : kBlockNames)
    if (m[2] == from) return "model.layers." + m[1].str() + "." + to + ".weight";
  return {};
}

// llama.cpp stores each head's query and key rows with the two halves of the rotary pairs
// interleaved (row 2 i + j of a head is Hugging Face's row j * head_dim / 2 + i); undone here.
void unpermute(std::vector<float>& w, int64_t heads, int64_t rows, int64_t cols, const std::string& name) {
  if (heads <= 0 || rows % heads != 0 || (rows / heads) % 2 != 0)
    throw io::Error("[weights] " + name + ": " + std::to_string(rows) + " rows do not split into " +
                    std::to_string(heads) + " heads of an even size");
  const int64_t hd = rows / heads, half = hd / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::copy_n(w.begin() + (h * hd + 2 * i + j) * cols, cols, out.begin() + (h * hd + j * half + i) * cols);
  w = std::move(out);
}

}  // namespace

bool is_gguf(const fs::path& path) { return !fs::is_directory(path) && path.extension() == ".gguf"; }

LlamaConfig llama_config_from_gguf(const fs::path& path) {
  const io::GgufFile f = io::read_gguf(path);
  const io::GgufValue& arch = need(f, "general.architecture");
  if (arch.string() == nullptr || *arch.string() != "llama") {
    throw ConfigError("[config] " + path.string() + ": general.architecture is " +
                      (arch.string() ? "'" + *arch.string() + "'" : std::string("not a string")) +
                      ": only \"llama\" is supported");
  }
  if (f.tensor("rope_freqs.weight") != nullptr) {
    throw ConfigError("[config] " + path.string() +
                      ": rope_freqs.weight (Llama 3 frequency factors) is not supported for GGUF files yet");
  }
  nlohmann::json j;
  j["hidden_size"] = integer(f, "llama.embedding_length");
  j["intermediate_size"] = integer(f, "llama.feed_forward_length");
  j["num_hidden_layers"] = integer(f, "llama.block_count");
  j["num_attention_heads"] = integer(f, "llama.attention.head_count");
  if (f.find("llama.attention.head_count_kv")) j["num_key_value_heads"] = integer(f, "llama.attention.head_count_kv");
  if (f.find("llama.attention.key_length")) j["head_dim"] = integer(f, "llama.attention.key_length");
  if (f.find("llama.context_length")) j["max_position_embeddings"] = integer(f, "llama.context_length");
  j["rope_theta"] = number(f, "llama.rope.freq_base", 10000.0);
  j["rms_norm_eps"] = number(f, "llama.attention.layer_norm_rms_epsilon", 1e-6);
  j["tie_word_embeddings"] = f.tensor("output.weight") == nullptr;
  const io::GgufTensorInfo* embed = f.tensor("token_embd.weight");
  if (f.find("llama.vocab_size"))
    j["vocab_size"] = integer(f, "llama.vocab_size");
  else if (embed != nullptr && embed->shape.size() == 2)
    j["vocab_size"] = embed->shape[0];
  if (const io::GgufValue* type = f.find("llama.rope.scaling.type"); type && type->string() && *type->string() != "none")
    j["rope_scaling"] = {{"rope_type", *type->string()}, {"factor", number(f, "llama.rope.scaling.factor", 1.0)}};
  return parse_llama_config(j.dump(), path.string());
}

std::map<std::string, io::TensorRecord> read_gguf_weights(const fs::path& path, const std::vector<std::string>& names) {
  const io::GgufMap map(path);
  const io::GgufFile& f = map.file();
  const LlamaConfig c = llama_config_from_gguf(path);
  std::map<std::string, io::TensorRecord> out;
  for (const io::GgufTensorInfo& t : f.tensors) {
    const std::string name = hf_name(t.name);
    if (name.empty() || (!names.empty() && std::find(names.begin(), names.end(), name) == names.end())) continue;
    std::vector<float> values(size_t(t.numel()));
    io::dequantize(t.type, map.data(t.name), values);
    const int64_t rows = t.shape.empty() ? 1 : t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
    if (t.shape.size() == 2 && name.ends_with("q_proj.weight")) unpermute(values, c.num_attention_heads, rows, cols, t.name);
    if (t.shape.size() == 2 && name.ends_with("k_proj.weight")) unpermute(values, c.num_key_value_heads, rows, cols, t.name);
    io::TensorRecord r;
    r.dtype = DType::f32;
    r.shape = t.shape;
    r.data.resize(values.size() * sizeof(float));
    std::memcpy(r.data.data(), values.data(), r.data.size());
    out.emplace(name, std::move(r));
  }
  return out;
}

}  // namespace meganeura::models
