// Llama checkpoints from Hugging Face files: config.json parsing (SmolLM2-135M's real file, the
// defaults, every malformed field named), the forward graph (the smollm2 workload is the
// SmolLM2-135M config), and weights from sharded files with the errors naming what is wrong.
#include "meganeura/llama.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "meganeura/safetensors.h"
#include "meganeura/session.h"
#include "meganeura/weights.h"
#include "meganeura/workloads.h"

namespace meganeura {
namespace {
namespace fs = std::filesystem;
using models::ConfigError;
using models::LlamaConfig;
using models::parse_llama_config;
using nlohmann::json;

// HuggingFaceTB/SmolLM2-135M's config.json, verbatim.
constexpr const char* kSmolLM2Config = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576,
  "initializer_range": 0.041666666666666664, "intermediate_size": 1536, "is_llama_config": true,
  "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 9,
  "num_hidden_layers": 30, "num_key_value_heads": 3, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_interleaved": false, "rope_scaling": null, "rope_theta": 100000, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true, "vocab_size": 49152})";

TEST(LlamaConfig, SmolLM2ConfigJsonIsTheWorkloadConfig) {
  const LlamaConfig c = parse_llama_config(kSmolLM2Config);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_hidden_layers, 30);
  EXPECT_EQ(c.num_attention_heads, 9);
  EXPECT_EQ(c.num_key_value_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_scaling.type, models::RopeScaling::Type::none);
  EXPECT_EQ(c, models::smollm2_135m_config());
  // The workload at full scale is that config: the same parameters, names and shapes as the
  // graph build_llama makes from the parsed file.
  Graph a, b;
  models::build_workload(a, "smollm2", models::Scale::full);
  models::build_llama(b, c, 1, 128);
  ASSERT_EQ(a.parameters().size(), b.parameters().size());
  for (NodeId id : a.parameters()) {
    const Node& n = a.node(id);
    auto other = b.find(n.name);
    ASSERT_TRUE(other.has_value()) << n.name;
    EXPECT_EQ(b.node(*other).type.shape, n.type.shape) << n.name;
  }
}

TEST(LlamaConfig, DefaultsFollowTransformers) {
  const LlamaConfig c = parse_llama_config(
      R"({"vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4})");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.max_position_embeddings, 2048);
}

TEST(LlamaConfig, RopeScalingLinearAndLlama3) {
  json j = json::parse(kSmolLM2Config);
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  LlamaConfig c = parse_llama_config(j.dump());
  EXPECT_EQ(c.rope_scaling.type, models::RopeScaling::Type::llama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  const RopeAttrs a = models::llama_rope_attrs(c);
  EXPECT_EQ(a.original_max_position, 8192);
  EXPECT_EQ(a.factor, 8.0);
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2}};  // the older key
  c = parse_llama_config(j.dump());
  EXPECT_EQ(c.rope_scaling.type, models::RopeScaling::Type::linear);
  EXPECT_EQ(models::llama_rope_attrs(c).factor, 2.0);
  EXPECT_EQ(models::llama_rope_attrs(c).original_max_position, 0);
}

std::string config_error(const json& j) {
  try {
    parse_llama_config(j.dump(), "ckpt/config.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(LlamaConfig, EachMalformedFieldIsNamed) {
  const json base = json::parse(kSmolLM2Config);
  struct Case {
    const char* key;  // set (or, with a null value, removed)
    json value;
    const char* named;
  };
  const json llama3_missing = {
      {"rope_type", "llama3"}, {"factor", 8.0}, {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  const std::vector<Case> cases = {
      {"hidden_size", nullptr, "'hidden_size' is missing"},
      {"vocab_size", nullptr, "'vocab_size' is missing"},
      {"hidden_size", "576", "'hidden_size' must be an integer"},
      {"num_hidden_layers", 30.5, "'num_hidden_layers' must be an integer"},
      {"intermediate_size", -1, "'intermediate_size' must be a positive integer"},
      {"num_attention_heads", 0, "'num_attention_heads' must be a positive integer"},
      {"vocab_size", uint64_t(1) << 40, "'vocab_size' is over the limit"},
      {"num_key_value_heads", 4, "'num_key_value_heads' (4) must divide num_attention_heads (9)"},
      {"head_dim", 63, "'head_dim' must be even"},
      {"rope_theta", "big", "'rope_theta' must be a number"},
      {"rms_norm_eps", 0, "'rms_norm_eps' must be a positive number"},
      {"tie_word_embeddings", 1, "'tie_word_embeddings' must be true or false"},
      {"hidden_act", "gelu", "'hidden_act' is 'gelu'"},
      {"architectures", json::array({"Qwen2ForCausalLM"}), "'architectures' is 'Qwen2ForCausalLM'"},
      {"architectures", "LlamaForCausalLM", "'architectures' must be a list"},
      {"model_type", "mistral", "'model_type' is 'mistral'"},
      {"attention_bias", true, "'attention_bias' is true"},
      {"rope_scaling", 2, "'rope_scaling' must be null or an object"},
      {"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2}}, "'rope_scaling.rope_type' is 'dynamic'"},
      {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 2}}, "'rope_scaling.rope_type' is 'yarn'"},
      {"rope_scaling", {{"factor", 2}}, "'rope_scaling.rope_type' is missing"},
      {"rope_scaling", {{"rope_type", "linear"}}, "'rope_scaling.factor' is missing"},
      {"rope_scaling", llama3_missing, "'rope_scaling.low_freq_factor' is missing"},
  };
  for (const Case& c : cases) {
    json j = base;
    if (c.value.is_null()) {
      j.erase(c.key);
    } else {
      j[c.key] = c.value;
    }
    const std::string msg = config_error(j);
    EXPECT_NE(msg.find(c.named), std::string::npos) << c.key << ": " << msg;
    EXPECT_NE(msg.find("ckpt/config.json"), std::string::npos) << msg;
  }
  EXPECT_NE(config_error(json::array()).find("must hold a JSON object"), std::string::npos);
  try {
    parse_llama_config("{\"hidden_size\": ", "ckpt/config.json");
    ADD_FAILURE() << "truncated JSON accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ckpt/config.json is not valid JSON"), std::string::npos) << e.what();
  }
  EXPECT_THROW(models::read_llama_config("/nonexistent/config.json"), ConfigError);
}

// ---- weights -----

LlamaConfig tiny(bool tied) {
  LlamaConfig c;
  c.vocab_size = 40;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.tie_word_embeddings = tied;
  return c;
}

// Random f32 tensors for every parameter of `g`, in bf16 where `bf16` (truncated: exact in both).
std::map<std::string, io::TensorRecord> random_weights(const Graph& g, bool bf16) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 0.3f);
  std::map<std::string, io::TensorRecord> out;
  for (NodeId id : g.parameters()) {
    const Node& n = g.node(id);
    io::TensorRecord r{bf16 ? DType::bf16 : DType::f32, n.type.shape, {}};
    const int64_t count = n.type.numel();
    r.data.resize(size_t(count) * (bf16 ? 2 : 4));
    for (int64_t i = 0; i < count; ++i) {
      const float v = nd(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (bf16) {
        const uint16_t hi = uint16_t(bits >> 16);
        std::memcpy(r.data.data() + i * 2, &hi, 2);
      } else {
        std::memcpy(r.data.data() + i * 4, &v, 4);
      }
    }
    out.emplace(n.name, std::move(r));
  }
  return out;
}

// Writes the tensors in two shards (layer 0 and the embedding in the first) and the index.
fs::path write_sharded(const fs::path& dir, const std::map<std::string, io::TensorRecord>& t) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  io::NamedTensorViews first, second;
  json map;
  for (auto& [name, r] : t) {
    const bool one = name.starts_with("model.embed") || name.starts_with("model.layers.0.");
    (one ? first : second).emplace_back(name, r.view());
    map[name] = one ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  io::write_safetensors(dir / "model-00001-of-00002.safetensors", first);
  io::write_safetensors(dir / "model-00002-of-00002.safetensors", second);
  std::ofstream(dir / "model.safetensors.index.json") << json{{"metadata", json::object()}, {"weight_map", map}};
  return dir;
}

std::vector<float> logits_of(const LlamaConfig& c, const fs::path& weights) {
  Graph g;
  Tensor logits = models::build_llama(g, c, 1, 5);
  g.output("logits", logits);
  Session s;
  s.add(g);
  EXPECT_EQ(load_weights(s, g, weights), g.parameters().size());
  const std::vector<int32_t> ids = {3, 1, 39, 7, 0};
  s.set("input_ids", std::span<const int32_t>(ids));
  s.run();
  return s.get("logits");
}

std::string load_error(const LlamaConfig& c, const fs::path& weights) {
  Graph g;
  g.output("logits", models::build_llama(g, c, 1, 5));
  Session s;
  s.add(g);
  try {
    load_weights(s, g, weights);
  } catch (const io::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(LlamaWeights, ShardedEqualsSingleFileTiedAndUntied) {
  const fs::path root = fs::temp_directory_path() / ("meganeura_llama_" + std::to_string(::getpid()));
  for (bool tied : {true, false}) {
    const LlamaConfig c = tiny(tied);
    Graph g;
    models::build_llama(g, c, 1, 5);
    EXPECT_EQ(g.find("lm_head.weight").has_value(), !tied);
    const auto t = random_weights(g, true);
    const fs::path dir = write_sharded(root / "sharded", t);
    io::NamedTensorViews all;
    for (auto& [name, r] : t) all.emplace_back(name, r.view());
    io::write_safetensors(root / "one.safetensors", all);
    const std::vector<float> a = logits_of(c, dir), b = logits_of(c, root / "one.safetensors");
    ASSERT_EQ(a.size(), size_t(5 * 40));
    EXPECT_EQ(a, b);  // the same values, the same program: bit-equal
  }
  fs::remove_all(root);
}

TEST(LlamaWeights, MismatchesAreNamed) {
  const fs::path root = fs::temp_directory_path() / ("meganeura_llama_err_" + std::to_string(::getpid()));
  const LlamaConfig c = tiny(false);
  Graph g;
  models::build_llama(g, c, 1, 5);
  auto t = random_weights(g, false);
  // A k_proj of the wrong shape (as if the file had 4 key-value heads).
  auto bad = t;
  bad["model.layers.1.self_attn.k_proj.weight"].shape = {16, 16};
  bad["model.layers.1.self_attn.k_proj.weight"].data.resize(16 * 16 * 4);
  std::string msg = load_error(c, write_sharded(root / "shape", bad));
  EXPECT_NE(msg.find("'model.layers.1.self_attn.k_proj.weight' has shape (16,16)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expects (8,16)"), std::string::npos) << msg;
  // lm_head.weight absent from an untied checkpoint.
  auto missing = t;
  missing.erase("lm_head.weight");
  msg = load_error(c, write_sharded(root / "missing", missing));
  EXPECT_NE(msg.find("'lm_head.weight' is missing"), std::string::npos) << msg;
  // The index maps to a shard that is not there.
  const fs::path dir = write_sharded(root / "shard", t);
  fs::remove(dir / "model-00002-of-00002.safetensors");
  msg = load_error(c, dir);
  EXPECT_NE(msg.find("model-00002-of-00002.safetensors"), std::string::npos) << msg;
  fs::remove_all(root);
}

}  // namespace
}  // namespace meganeura
