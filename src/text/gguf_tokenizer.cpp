// Byte-level BPE tokenizers in GGUF files: see gguf_tokenizer.h. llama.cpp's keys are turned
// into a tokenizer.json document and loaded through the same checks as a file.
#include "text/gguf_tokenizer.h"

#include <nlohmann/json.hpp>

#include "text/tokenizer_impl.h"

namespace meganeura::text {
namespace {

using nlohmann::json;

// llama.cpp's token types.
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

[[noreturn]] void fail(const io::GgufFile& f, const std::string& key, const std::string& what) {
  throw TokenizerError("tokenizer: " + f.source.string() + ": " + key + ": " + what);
}

const io::GgufArray& array_of(const io::GgufFile& f, const std::string& key, io::GgufType element) {
  const io::GgufValue* v = f.find(key);
  if (v == nullptr) fail(f, key, "missing");
  const io::GgufArray* a = v->array();
  if (a == nullptr || (a->element != element && !a->items.empty())) fail(f, key, "not an array of the expected type");
  return *a;
}

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}
json split(SplitPattern p) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", std::string(split_pattern_regex(p))}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

// The pre_tokenizer of llama.cpp's name for it.
json pre_tokenizer(const io::GgufFile& f) {
  const io::GgufValue* v = f.find("tokenizer.ggml.pre");
  const std::string name = v == nullptr ? "gpt-2" : v->string() ? *v->string() : "";
  if (name == "gpt-2" || name == "gpt2" || name == "default") return byte_level(true);
  if (name == "smollm")
    return {{"type", "Sequence"},
            {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)})}};
  if (name == "llama-bpe" || name == "llama3" || name == "qwen2") {
    const SplitPattern p = name == "qwen2" ? SplitPattern::kQwen2 : SplitPattern::kLlama3;
    return {{"type", "Sequence"}, {"pretokenizers", json::array({split(p), byte_level(false)})}};
  }
  fail(f, "tokenizer.ggml.pre",
       v->string() ? "unsupported pre-tokenizer '" + name + "' (supported: gpt-2, default, smollm, llama-bpe, qwen2)"
                   : "not a string");
}

// llama.cpp's name of a loaded pre-tokenizer, or "" for one that has none.
std::string pre_name(const Tokenizer::Impl& t) {
  using K = PreTokenizerStep::Kind;
  const auto& s = t.pre_tokenizer;
  if (t.add_prefix_space) return "";  // a normalizer has no key: tokenizer.huggingface.json keeps it
  if (s.size() == 1 && s[0].kind == K::kByteLevelRegex) return "gpt-2";
  if (s.size() == 2 && s[0].kind == K::kDigits && s[0].individual_digits && s[1].kind == K::kByteLevelRegex)
    return "smollm";
  if (s.size() == 1 && s[0].kind == K::kSplit && s[0].pattern == SplitPattern::kLlama3) return "llama-bpe";
  if (s.size() == 1 && s[0].kind == K::kSplit && s[0].pattern == SplitPattern::kQwen2) return "qwen2";
  return "";
}

io::GgufValue string_array(std::vector<std::string> items) {
  io::GgufArray a{.element = io::GgufType::string, .items = {}};
  a.items.reserve(items.size());
  for (std::string& s : items) a.items.push_back({std::move(s)});
  return {std::move(a)};
}

}  // namespace

Tokenizer tokenizer_from_gguf(const io::GgufFile& f) {
  if (const io::GgufValue* hf = f.find("tokenizer.huggingface.json")) {
    if (hf->string() == nullptr) fail(f, "tokenizer.huggingface.json", "not a string");
    return Tokenizer::from_json(*hf->string(), f.source.string() + ": tokenizer.huggingface.json");
  }
  const io::GgufValue* model = f.find("tokenizer.ggml.model");
  if (model == nullptr) fail(f, "tokenizer.ggml.model", "missing: the file holds no tokenizer");
  if (model->string() == nullptr || *model->string() != "gpt2") {
    fail(f, "tokenizer.ggml.model",
         (model->string() ? "'" + *model->string() + "'" : std::string("not a string")) +
             ": only \"gpt2\" (byte-level BPE) is supported");
  }
  const io::GgufArray& tokens = array_of(f, "tokenizer.ggml.tokens", io::GgufType::string);
  const io::GgufArray& merges = array_of(f, "tokenizer.ggml.merges", io::GgufType::string);
  const io::GgufArray* types =
      f.find("tokenizer.ggml.token_type") ? &array_of(f, "tokenizer.ggml.token_type", io::GgufType::i32) : nullptr;
  if (types != nullptr && types->items.size() != tokens.items.size()) {
    fail(f, "tokenizer.ggml.token_type",
         std::to_string(types->items.size()) + " types for " + std::to_string(tokens.items.size()) + " tokens");
  }
  if (int64_t(tokens.items.size()) > kMaxTokenId + 1)
    fail(f, "tokenizer.ggml.tokens", std::to_string(tokens.items.size()) + " tokens, over kMaxTokenId");
  json vocab = json::object(), added = json::array(), merge_list = json::array();
  for (size_t id = 0; id < tokens.items.size(); ++id) {
    const std::string& token = *tokens.items[id].string();
    const int32_t type = types ? std::get<int32_t>(types->items[id].v) : kNormal;
    if (type == kUnused) continue;
    if (!vocab.contains(token)) vocab[token] = id;
    if (type == kControl || type == kUserDefined)
      added.push_back({{"id", id}, {"content", token}, {"special", type == kControl}});
  }
  for (const io::GgufValue& m : merges.items) merge_list.push_back(*m.string());
  const json doc = {{"model", {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merge_list)}}},
                    {"added_tokens", std::move(added)},
                    {"pre_tokenizer", pre_tokenizer(f)},
                    {"decoder", {{"type", "ByteLevel"}}}};
  std::string text;
  try {
    text = doc.dump();
  } catch (const json::exception&) {
    fail(f, "tokenizer.ggml.tokens", "a token or merge is not valid UTF-8");
  }
  return Tokenizer::from_json(text, f.source.string() + ": tokenizer.ggml.*");
}

std::vector<std::pair<std::string, io::GgufValue>> gguf_tokenizer_metadata(std::string_view tokenizer_json,
                                                                           std::string_view origin,
                                                                           std::optional<int> bos,
                                                                           std::optional<int> eos) {
  Tokenizer::Impl impl;
  load_tokenizer_json(tokenizer_json, origin, impl);  // checks every field
  const json root = json::parse(tokenizer_json);
  const json& model = root.at("model");
  std::vector<std::string> tokens(impl.id_bytes.size());
  io::GgufArray types{.element = io::GgufType::i32, .items = {}};
  types.items.assign(tokens.size(), {int32_t(kUnused)});
  for (const auto& [token, id] : model.at("vocab").items()) {
    tokens[id.get<size_t>()] = token;
    types.items[id.get<size_t>()] = {int32_t(kNormal)};
  }
  for (const AddedToken& t : impl.added) {
    tokens[size_t(t.id)] = t.content;
    types.items[size_t(t.id)] = {int32_t(t.special ? kControl : kUserDefined)};
  }
  for (size_t id = 0; id < tokens.size(); ++id)
    if (std::get<int32_t>(types.items[id].v) == kUnused) tokens[id] = "[PAD" + std::to_string(id) + "]";
  std::vector<std::string> merges;
  if (const auto m = model.find("merges"); m != model.end())
    for (const json& pair : *m)
      merges.push_back(pair.is_string() ? pair.get<std::string>()
                                        : pair[0].get<std::string>() + " " + pair[1].get<std::string>());
  std::vector<std::pair<std::string, io::GgufValue>> out = {{"tokenizer.ggml.model", {std::string("gpt2")}},
                                                            {"tokenizer.ggml.tokens", string_array(std::move(tokens))},
                                                            {"tokenizer.ggml.token_type", {std::move(types)}},
                                                            {"tokenizer.ggml.merges", string_array(std::move(merges))}};
  if (const std::string pre = pre_name(impl); !pre.empty()) out.push_back({"tokenizer.ggml.pre", {pre}});
  if (bos) out.push_back({"tokenizer.ggml.bos_token_id", {uint32_t(*bos)}});
  if (eos) out.push_back({"tokenizer.ggml.eos_token_id", {uint32_t(*eos)}});
  out.push_back({"tokenizer.huggingface.json", {std::string(tokenizer_json)}});
  return out;
}

std::vector<int> gguf_eos_token_ids(const io::GgufFile& f) {
  const io::GgufValue* v = f.find("tokenizer.ggml.eos_token_id");
  if (v == nullptr || !v->integer()) return {};
  return {int(*v->integer())};
}

}  // namespace meganeura::text
