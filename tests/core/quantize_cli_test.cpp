// `meganeura quantize` and `generate --gguf`: a small random Llama checkpoint with a tokenizer
// written as one GGUF file. In f32 the file generates the checkpoint's tokens and text; in Q8_0
// (with per-tensor overrides) its logits are those of the model whose tensors were rounded in
// memory through the same formats; the report counts the tensors and bytes of each type; bad
// options and files that do not fit are refused naming them; `program` and `profile` show the
// weight bytes each dispatch reads in each format.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "cli_run.h"
#include "meganeura/generate.h"
#include "meganeura/gguf.h"
#include "meganeura/safetensors.h"
#include "small_llama.h"
#include "vulkan_test_util.h"

namespace meganeura {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

models::LlamaConfig small_config() { return testing::small_llama_config(); }

const char* kConfig = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 320, "hidden_size": 64,
  "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 16, "max_position_embeddings": 128, "rope_theta": 5000, "rms_norm_eps": 1e-5,
  "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 300, "eos_token_id": 300})";

// Ids 0..255 the bytes (GPT-2's alphabet), 256 "ab", 300 a special token, the rest words.
json tokenizer_json() {
  json vocab = json::object();
  uint32_t next = 256;
  auto utf8 = [](uint32_t c) {
    std::string s;
    if (c < 0x80) {
      s += char(c);
    } else {
      s += char(0xC0 | (c >> 6));
      s += char(0x80 | (c & 0x3F));
    }
    return s;
  };
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    vocab[utf8(printable ? b : next++)] = b;
  }
  vocab["ab"] = 256;
  for (int id = 257; id < 320; ++id)  // every id a model of 320 logits may pick decodes
    if (id != 300) vocab["t" + std::to_string(id)] = id;
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b"})}}},
          {"added_tokens", json::array({{{"id", 300}, {"content", "<|end|>"}, {"special", true}}})},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}}}};
}

struct Checkpoint {
  fs::path dir = cli_run::temp_dir("meganeura-quantize-");
  std::map<std::string, std::vector<float>> weights;
  std::vector<std::vector<int64_t>> shapes;
  Checkpoint() {
    Generator g(small_config(), {.max_context = 64, .prefill_chunk = 8});
    weights = testing::residual_scaled_weights(g.session(), 9);
    io::NamedTensorViews views;
    shapes.reserve(weights.size());
    for (const auto& [name, v] : weights) {
      shapes.push_back(g.session().buffers().at(name).type.shape);
      views.push_back({name, {DType::f32, shapes.back(), std::as_bytes(std::span(v))}});
    }
    io::write_safetensors(dir / "model.safetensors", views);
    std::ofstream(dir / "config.json") << kConfig;
    std::ofstream(dir / "tokenizer.json") << tokenizer_json().dump();
  }
  ~Checkpoint() { fs::remove_all(dir); }
  std::string quantize(const std::string& extra) const {
    return "quantize --weights " + (dir / "model.safetensors").string() + " --config " +
           (dir / "config.json").string() + " " + extra;
  }
};

TEST(QuantizeCli, F32FileGeneratesWhatTheCheckpointDoes) {
  Checkpoint ck;
  const fs::path out = ck.dir / "f32.gguf";
  auto q = cli_run::run(
      ck.quantize("--tokenizer " + (ck.dir / "tokenizer.json").string() + " --type f32 --out " + out.string()), ck.dir);
  ASSERT_EQ(q.status, 0) << q.err;
  EXPECT_NE(q.out.find("with the tokenizer"), std::string::npos) << q.out;
  const std::string gen = " --prompt 'ab c ab' --temperature 0 --max-new-tokens 16 --ignore-eos --json --threads 1";
  auto want = cli_run::run("generate --config " + ck.dir.string() + " --weights " + ck.dir.string() + " --tokenizer " +
                               (ck.dir / "tokenizer.json").string() + gen,
                           ck.dir);
  auto got = cli_run::run("generate --gguf " + out.string() + gen, ck.dir);
  ASSERT_EQ(want.status, 0) << want.err;
  ASSERT_EQ(got.status, 0) << got.err;
  EXPECT_EQ(got.json()["tokens"], want.json()["tokens"]);
  EXPECT_EQ(got.json()["text"], want.json()["text"]);
  EXPECT_EQ(got.json()["prompt_tokens"], 5);  // "ab", " ", "c", " ", "ab"
  std::set<int> distinct;
  const json tokens = got.json()["tokens"];
  for (int t : tokens) distinct.insert(t);
  EXPECT_GE(distinct.size(), 3u) << "the tokens should vary for the comparison to mean something";
}

TEST(QuantizeCli, Q8_0FileIsTheModelRoundedInMemory) {
  Checkpoint ck;
  const fs::path out = ck.dir / "q8.gguf";
  auto q = cli_run::run(ck.quantize("--type q8_0 --override embed_tokens=f16 --override "
                                    "'layers\\.1\\.mlp\\.down_proj=q4_0' --json --out " +
                                    out.string()),
                        ck.dir);
  ASSERT_EQ(q.status, 0) << q.err;
  const json r = q.json();
  EXPECT_EQ(r["types"]["q8_0"]["tensors"], 14);  // 7 matrices per layer and lm_head, less one
  EXPECT_EQ(r["types"]["q4_0"]["tensors"], 1);
  EXPECT_EQ(r["types"]["f16"]["tensors"], 1);
  EXPECT_EQ(r["types"]["f32"]["tensors"], 5);  // the norms
  // Bytes from the formats: Q8_0 34 per 32 values, Q4_0 18, f16 2 per value, f32 4.
  const int64_t d = 64, f = 96, v = 320;
  const int64_t q8_values = 2 * (d * d + 2 * 32 * d + d * d + 2 * f * d + d * f) - d * f + v * d;
  const uint64_t bytes = uint64_t(q8_values / 32 * 34 + d * f / 32 * 18 + v * d * 2 + 5 * d * 4);
  EXPECT_EQ(r["bytes"], bytes);
  EXPECT_EQ(r["f32_bytes"], uint64_t(q8_values + d * f + v * d + 5 * d) * 4);
  EXPECT_LT(r["types"]["q8_0"]["worst_rel_error"].get<double>(), 0.01);  // measured 0.5%
  EXPECT_GT(r["types"]["q4_0"]["worst_rel_error"].get<double>(), 0.05);  // measured 8.6%
  EXPECT_EQ(r["types"]["f32"]["worst_rel_error"], 0.0);

  const fs::path dump = ck.dir / "logits.safetensors";
  auto gen = cli_run::run("generate --gguf " + out.string() +
                              " --prompt-ids 3,141,59,265 --temperature 0 "
                              "--max-new-tokens 8 --ignore-eos --json --threads 1 --dump-logits " +
                              dump.string(),
                          ck.dir);
  ASSERT_EQ(gen.status, 0) << gen.err;
  const std::vector<int> tokens = gen.json()["tokens"];
  const io::SafetensorsFile file = io::read_safetensors(dump);
  const io::TensorRecord& logits = file.tensors.at("logits");
  ASSERT_EQ(logits.shape, (std::vector<int64_t>{8, 320}));
  const std::span<const float> rows(reinterpret_cast<const float*>(logits.data.data()), size_t(logits.numel()));

  // The same model in memory: each tensor rounded through its format.
  Generator rounded(small_config(), {.max_context = 64, .prefill_chunk = 8, .session = {.threads = 1}});
  Generator exact(small_config(), {.max_context = 64, .prefill_chunk = 8, .session = {.threads = 1}});
  for (const auto& [name, w] : ck.weights) {
    io::GgmlType type = name.find("norm") != std::string::npos ? io::GgmlType::f32 : io::GgmlType::q8_0;
    if (name.find("embed_tokens") != std::string::npos) type = io::GgmlType::f16;
    if (name.find("layers.1.mlp.down_proj") != std::string::npos) type = io::GgmlType::q4_0;
    std::vector<float> r(w.size());
    io::dequantize(uint32_t(type), io::quantize(type, w), r);
    rounded.session().set(name, r);
    exact.session().set(name, w);
  }
  std::vector<int32_t> ids = {3, 141, 59, 265};
  auto rel = [](std::span<const float> a, const std::vector<float>& b) {
    double e = 0, n = 0;
    for (size_t i = 0; i < b.size(); ++i) e += std::pow(double(a[i]) - b[i], 2), n += double(b[i]) * b[i];
    return std::sqrt(e / n);
  };
  for (size_t step = 0; step < tokens.size(); ++step) {
    const std::vector<float> want = rounded.feed(ids), f32 = exact.feed(ids);
    const std::span<const float> got = rows.subspan(step * 320, 320);
    // The CLI and this process run the same kernels on the same values: only the order of
    // float sums may differ. Rounding itself moves the logits by about 1% (checked below).
    EXPECT_LT(rel(got, want), 1e-5) << "step " << step;
    EXPECT_GT(rel(got, f32), 1e-3) << "step " << step << ": the file's weights should be rounded";
    ids = {int32_t(tokens[step])};
  }
}

TEST(QuantizeCli, RefusalsNameWhatIsWrong) {
  Checkpoint ck;
  const std::string out = " --out " + (ck.dir / "x.gguf").string();
  auto r = cli_run::run(ck.quantize("--type q4_k" + out), ck.dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("model.embed_tokens.weight [320, 64]: its rows of 64 values are not a multiple of Q4_K's block "
                       "of 256"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(ck.dir / "x.gguf")) << "nothing is written when a tensor cannot be";
  r = cli_run::run(ck.quantize("--type q5_0" + out), ck.dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--type 'q5_0': expected q8_0, q4_0, q4_k, f16, bf16 or f32"), std::string::npos) << r.err;
  r = cli_run::run(ck.quantize("--override 'embed(=f16'" + out), ck.dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("override pattern 'embed(' is not a regular expression"), std::string::npos) << r.err;
  r = cli_run::run(ck.quantize("--override embed" + out), ck.dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("expected PATTERN=TYPE"), std::string::npos) << r.err;
  // A config wider than the checkpoint: the tensor is named with both shapes.
  std::string wide = kConfig;
  wide.replace(wide.find("\"intermediate_size\": 96"), 23, "\"intermediate_size\": 128");
  std::ofstream(ck.dir / "wide.json") << wide;
  r = cli_run::run("quantize --weights " + (ck.dir / "model.safetensors").string() + " --config " +
                       (ck.dir / "wide.json").string() + out,
                   ck.dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("mlp.gate_proj.weight is f32 [96, 64], the config needs float [128, 64]"), std::string::npos)
      << r.err;
  // A file without a tokenizer cannot take a text prompt; --gguf excludes --config.
  ASSERT_EQ(cli_run::run(ck.quantize(out), ck.dir).status, 0);
  r = cli_run::run("generate --gguf " + (ck.dir / "x.gguf").string() + " --prompt hi", ck.dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--prompt needs --tokenizer"), std::string::npos) << r.err;
  r = cli_run::run(
      "generate --gguf " + (ck.dir / "x.gguf").string() + " --config " + ck.dir.string() + " --prompt-ids 1", ck.dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("give neither --config nor --weights"), std::string::npos) << r.err;
}

// `program --config --weights-dtype` and `profile --config`: each dispatch's weight bytes,
// against the bytes the test computes from the config: a decode step reads every matrix once in
// its format (34 bytes per 32 weights in Q8_0), one row of the embedding and the norms in f32.
TEST(QuantizeCli, ProgramAndProfileShowWeightBytesPerDispatch) {
  Checkpoint ck;
  const models::LlamaConfig c = small_config();
  for (const std::string dtype : {"f32", "q8_0", "q4_0"}) {
    SCOPED_TRACE(dtype);
    auto r = cli_run::run("program --config " + ck.dir.string() + " --max-context 32 --json --weights-dtype " + dtype,
                          ck.dir);
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = r.json();
    const json* decode = nullptr;
    for (const json& p : j["programs"])
      if (p["tokens"] == 1) decode = &p["program"];
    ASSERT_NE(decode, nullptr);
    const double per = dtype == "f32" ? 4.0 : dtype == "q8_0" ? 34.0 / 32 : 18.0 / 32;
    const int64_t h = c.hidden_size, kv = c.num_key_value_heads * c.head_dim, f = c.intermediate_size;
    const int64_t matrices = c.num_hidden_layers * (2 * h * h + 2 * kv * h + 3 * f * h) + c.vocab_size * h;
    const double want =
        per * double(matrices + h) + 4.0 * double((2 * c.num_hidden_layers + 1) * h);  // + a row, the norms
    uint64_t sum = 0, largest = 0;
    for (const json& d : (*decode)["dispatches"]) {
      sum += d["weight_bytes"].get<uint64_t>();
      if (d["op"] == (dtype == "f32" ? "matmul" : "matmul_q"))
        largest = std::max(largest, d["weight_bytes"].get<uint64_t>());
    }
    EXPECT_EQ(double(sum), want);
    EXPECT_EQ((*decode)["weight_bytes"].get<uint64_t>(), sum);
    EXPECT_EQ(double(largest), per * double(c.vocab_size * h)) << "the head";
    std::string why = testing_vulkan::missing_device();
    if (!why.empty()) {
      std::printf("skipped the profile: %s\n", why.c_str());
      continue;
    }
    r = cli_run::run(
        "profile --config " + ck.dir.string() + " --max-context 32 --steps 2 --json --weights-dtype " + dtype, ck.dir,
        "MEGANEURA_VULKAN_VALIDATION=" + std::string(testing_vulkan::validation_wanted() ? "1" : "0"));
    ASSERT_EQ(r.status, 0) << r.err;
    const json p = r.json();
    EXPECT_EQ(p["weight_bytes_per_step"].get<double>(), want);
    double kernels = 0;
    for (const json& k : p["kernels"]) kernels += k["weight_bytes"].get<double>();
    EXPECT_EQ(kernels, want);
  }
}

}  // namespace
}  // namespace meganeura
