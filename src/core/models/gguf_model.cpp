// A Llama-architecture GGUF file (llama.cpp's layout) as a Hugging Face config and checkpoint:
// the hyperparameters from the llama.* keys, the tensors renamed to the Hugging Face names and
// decoded to f32, with the query and key projections' rows put back in the order the rotary
// embedding of the Hugging Face layout expects. See models/gguf_model.h.
#include "models/gguf_model.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>

#include "meganeura/dtype.h"
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
    {"attn_norm", "input_layernorm"}, {"attn_q", "self_attn.q_proj"},      {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},   {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},    {"ffn_up", "mlp.up_proj"},           {"ffn_down", "mlp.down_proj"}};

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

// The inverse of unpermute: Hugging Face's row j * head_dim / 2 + i of a head becomes row 2 i + j.
std::vector<float> permute(const std::vector<float>& w, int64_t heads, int64_t rows, int64_t cols) {
  const int64_t hd = rows / heads, half = hd / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::copy_n(w.begin() + (h * hd + j * half + i) * cols, cols, out.begin() + (h * hd + 2 * i + j) * cols);
  return out;
}

// The tensors of a config, Hugging Face name -> (llama.cpp name, shape).
std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> llama_tensors(const LlamaConfig& c) {
  const int64_t d = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim,
                f = c.intermediate_size;
  std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> out = {
      {"model.embed_tokens.weight", "token_embd.weight", {c.vocab_size, d}},
      {"model.norm.weight", "output_norm.weight", {d}}};
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", "output.weight", {c.vocab_size, d}});
  const std::vector<int64_t> shapes[] = {{d}, {q, d}, {kv, d}, {kv, d}, {d, q}, {d}, {f, d}, {f, d}, {d, f}};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string n = std::to_string(l);
    for (size_t k = 0; k < std::size(kBlockNames); ++k)
      out.push_back({"model.layers." + n + "." + kBlockNames[k].second + ".weight",
                     "blk." + n + "." + kBlockNames[k].first + ".weight", shapes[k]});
  }
  return out;
}

// llama.cpp's general.file_type of a file mostly in `t`.
uint32_t file_type(io::GgmlType t) {
  switch (t) {
    case io::GgmlType::f32: return 0;
    case io::GgmlType::f16: return 1;
    case io::GgmlType::q4_0: return 2;
    case io::GgmlType::q8_0: return 7;
    case io::GgmlType::q4_k: return 15;
    case io::GgmlType::bf16: return 32;
  }
  return 0;
}

}  // namespace

std::string ggml_type_name(io::GgmlType t) {
  std::string name(io::ggml_block(uint32_t(t))->name);
  for (char& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return name;
}

std::optional<io::GgmlType> ggml_type_from_name(std::string_view name) {
  for (io::GgmlType t : {io::GgmlType::f32, io::GgmlType::f16, io::GgmlType::bf16, io::GgmlType::q8_0,
                         io::GgmlType::q4_0, io::GgmlType::q4_k})
    if (ggml_type_name(t) == name) return t;
  return std::nullopt;
}

GgufExport write_llama_gguf(const fs::path& path, const LlamaConfig& c,
                            const std::map<std::string, io::TensorRecord>& weights, const GgufExportOptions& options) {
  if (c.rope_scaling.type == RopeScaling::Type::llama3)
    throw ConfigError("[quantize] Llama 3 rope scaling (rope_freqs.weight) is not supported in GGUF files yet");
  std::vector<std::pair<std::regex, io::GgmlType>> overrides;
  for (const auto& [pattern, type] : options.overrides) {
    try {
      overrides.emplace_back(std::regex(pattern), type);
    } catch (const std::regex_error& e) {
      throw ConfigError("[quantize] override pattern '" + pattern + "' is not a regular expression: " + e.what());
    }
  }
  std::vector<std::pair<std::string, io::GgufValue>> meta = {
      {"general.architecture", {std::string("llama")}},
      {"general.file_type", {file_type(options.type)}},
      {"llama.vocab_size", {uint32_t(c.vocab_size)}},
      {"llama.context_length", {uint32_t(c.max_position_embeddings)}},
      {"llama.embedding_length", {uint32_t(c.hidden_size)}},
      {"llama.block_count", {uint32_t(c.num_hidden_layers)}},
      {"llama.feed_forward_length", {uint32_t(c.intermediate_size)}},
      {"llama.attention.head_count", {uint32_t(c.num_attention_heads)}},
      {"llama.attention.head_count_kv", {uint32_t(c.num_key_value_heads)}},
      {"llama.attention.key_length", {uint32_t(c.head_dim)}},
      {"llama.attention.value_length", {uint32_t(c.head_dim)}},
      {"llama.rope.dimension_count", {uint32_t(c.head_dim)}},
      {"llama.rope.freq_base", {float(c.rope_theta)}},
      {"llama.attention.layer_norm_rms_epsilon", {float(c.rms_norm_eps)}}};
  if (c.rope_scaling.type == RopeScaling::Type::linear) {
    meta.push_back({"llama.rope.scaling.type", {std::string("linear")}});
    meta.push_back({"llama.rope.scaling.factor", {float(c.rope_scaling.factor)}});
  }
  if (options.type != io::GgmlType::f32 && options.type != io::GgmlType::f16 && options.type != io::GgmlType::bf16)
    meta.push_back({"general.quantization_version", {uint32_t(2)}});
  meta.insert(meta.end(), options.metadata.begin(), options.metadata.end());

  GgufExport report;
  std::vector<std::vector<std::byte>> data;
  std::vector<io::GgufTensorView> views;
  for (const auto& [name, gguf_name, shape] : llama_tensors(c)) {
    const auto it = weights.find(name);
    if (it == weights.end()) throw ConfigError("[quantize] the checkpoint has no tensor " + name);
    const io::TensorRecord& r = it->second;
    if (r.shape != shape || !dtype_is_float(r.dtype)) {
      throw ConfigError("[quantize] " + name + " is " + std::string(dtype_name(r.dtype)) + " " +
                        io::format_shape(r.shape) + ", the config needs float " + io::format_shape(shape));
    }
    std::vector<float> v(size_t(r.numel()));
    convert_values(r.dtype, r.data.data(), DType::f32, v.data(), r.numel());
    if (name.ends_with("q_proj.weight")) v = permute(v, c.num_attention_heads, shape[0], shape[1]);
    if (name.ends_with("k_proj.weight")) v = permute(v, c.num_key_value_heads, shape[0], shape[1]);
    io::GgmlType type = shape.size() == 2 ? options.type : io::GgmlType::f32;
    for (const auto& [re, t] : overrides)
      if (std::regex_search(name, re)) {
        type = t;
        break;
      }
    const io::GgmlBlock block = *io::ggml_block(uint32_t(type));
    if (shape.back() % block.block != 0) {
      throw ConfigError("[quantize] " + name + " " + io::format_shape(shape) + ": its rows of " +
                        std::to_string(shape.back()) + " values are not a multiple of " + std::string(block.name) +
                        "'s block of " + std::to_string(block.block) +
                        " (choose another --type, or --override for this tensor)");
    }
    data.push_back(io::quantize(type, v));
    std::vector<float> back(v.size());
    io::dequantize(uint32_t(type), data.back(), back);
    double e = 0, n = 0;
    for (size_t i = 0; i < v.size(); ++i) e += std::pow(double(back[i]) - v[i], 2), n += double(v[i]) * v[i];
    report.tensors.push_back({name, gguf_name, type, shape, data.back().size(), n > 0 ? std::sqrt(e / n) : 0.0});
    report.f32_bytes += v.size() * sizeof(float);
    report.bytes += data.back().size();
    views.push_back({gguf_name, uint32_t(type), shape, {}});
  }
  for (size_t i = 0; i < views.size(); ++i) views[i].data = data[i];
  io::write_gguf(path, meta, views);
  return report;
}

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
  if (const io::GgufValue* type = f.find("llama.rope.scaling.type");
      type && type->string() && *type->string() != "none")
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
    if (t.shape.size() == 2 && name.ends_with("q_proj.weight"))
      unpermute(values, c.num_attention_heads, rows, cols, t.name);
    if (t.shape.size() == 2 && name.ends_with("k_proj.weight"))
      unpermute(values, c.num_key_value_heads, rows, cols, t.name);
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
