// Reading tokenizer.json: every field checked, every error naming the field.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "text/tokenizer_impl.h"
#include "text/utf8.h"

namespace meganeura::text {

namespace {

using nlohmann::json;

class Loader {
 public:
  Loader(std::string_view origin, Tokenizer::Impl& impl) : origin_(origin), impl_(impl) {}
  void load(const json& root);

 private:
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw TokenizerError(origin_ + ": " + field + ": " + what);
  }
  const json* member(const json& obj, const char* key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  const json& require(const json& obj, const std::string& field, const char* key) {
    const json* v = member(obj, key);
    if (v == nullptr) fail(field.empty() ? std::string(key) : field + "." + key, "missing");
    return *v;
  }
  std::string string_of(const json& v, const std::string& field) const {
    if (!v.is_string()) fail(field, "expected a string, got " + std::string(v.type_name()));
    std::string s = v.get<std::string>();
    if (utf8_first_invalid(s) != s.size()) fail(field, "not valid UTF-8");
    return s;
  }
  bool flag(const json& obj, const std::string& field, const char* key, bool fallback) const {
    const json* v = member(obj, key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail(field + "." + key, "expected true or false, got " + std::string(v->type_name()));
    return v->get<bool>();
  }
  void require_unset(const json& obj, const std::string& field, const char* key) const {
    const json* v = member(obj, key);
    if (v == nullptr || (v->is_boolean() && !v->get<bool>()) || (v->is_string() && v->get<std::string>().empty()))
      return;
    fail(field + "." + key, "unsupported value " + v->dump());
  }
  int id_of(const json& v, const std::string& field) const {
    if (!v.is_number_integer()) fail(field, "expected an integer id, got " + std::string(v.type_name()));
    int64_t id = v.get<int64_t>();
    if (id < 0 || id > kMaxTokenId)
      fail(field, "id " + std::to_string(id) + " outside [0, kMaxTokenId = " + std::to_string(kMaxTokenId) + "]");
    return static_cast<int>(id);
  }
  void set_id_bytes(int id, std::string bytes) {
    if (impl_.id_bytes.size() <= static_cast<size_t>(id)) impl_.id_bytes.resize(static_cast<size_t>(id) + 1);
    impl_.id_bytes[id] = std::move(bytes);
  }
  int vocab_id(const std::string& token, const std::string& field) const {
    auto it = token_ids_.find(token);
    if (it == token_ids_.end()) fail(field, "token \"" + token + "\" is not in model.vocab");
    return it->second;
  }

  void load_model(const json& model);
  void load_vocab(const json& vocab);
  void load_merges(const json& merges);
  void load_added_tokens(const json& added);
  void load_normalizer(const json& n, const std::string& field, bool nested);
  void load_pre_tokenizer(const json& p, const std::string& field, bool nested);
  void load_decoder(const json& d);

  std::string origin_;
  Tokenizer::Impl& impl_;
  bool has_byte_level_ = false;
  StringMap token_ids_;  // model.vocab as written (in the byte alphabet)
};

void Loader::load(const json& root) {
  if (!root.is_object()) fail("(top level)", "expected an object, got " + std::string(root.type_name()));
  load_model(require(root, "", "model"));
  if (const json* a = member(root, "added_tokens")) load_added_tokens(*a);
  if (const json* n = member(root, "normalizer")) load_normalizer(*n, "normalizer", false);
  load_pre_tokenizer(require(root, "", "pre_tokenizer"), "pre_tokenizer", false);
  if (!has_byte_level_) fail("pre_tokenizer", "no ByteLevel step: only byte-level BPE is supported");
  load_decoder(require(root, "", "decoder"));
}

void Loader::load_model(const json& model) {
  if (!model.is_object()) fail("model", "expected an object, got " + std::string(model.type_name()));
  std::string type = string_of(require(model, "model", "type"), "model.type");
  if (type != "BPE") fail("model.type", "unsupported model \"" + type + "\" (only BPE)");
  if (const json* d = member(model, "dropout"))
    if (!(d->is_number() && d->get<double>() == 0.0)) fail("model.dropout", "unsupported value " + d->dump());
  require_unset(model, "model", "byte_fallback");
  require_unset(model, "model", "continuing_subword_prefix");
  require_unset(model, "model", "end_of_word_suffix");
  flag(model, "model", "fuse_unk", false);
  impl_.model.set_ignore_merges(flag(model, "model", "ignore_merges", false));
  const json& vocab = require(model, "model", "vocab");
  load_vocab(vocab);
  if (const json* unk = member(model, "unk_token"))
    impl_.model.set_unknown(vocab_id(string_of(*unk, "model.unk_token"), "model.unk_token"));
  load_merges(require(model, "model", "merges"));
}

void Loader::load_vocab(const json& vocab) {
  if (!vocab.is_object()) fail("model.vocab", "expected an object of token: id, got " + std::string(vocab.type_name()));
  std::vector<bool> seen;
  for (const auto& [token, v] : vocab.items()) {
    std::string field = "model.vocab[\"" + token + "\"]";
    if (token.empty()) fail("model.vocab", "an empty token");
    if (utf8_first_invalid(token) != token.size()) fail("model.vocab", "a token that is not valid UTF-8");
    int id = id_of(v, field);
    if (seen.size() <= static_cast<size_t>(id)) seen.resize(static_cast<size_t>(id) + 1);
    if (seen[id]) fail(field, "id " + std::to_string(id) + " is given to another token too");
    seen[id] = true;
    token_ids_.emplace(token, id);
    std::string bytes = byte_level_decode(token);
    set_id_bytes(id, bytes);
    // Tokens with characters outside the byte alphabet decode as themselves but cannot be
    // the result of merging bytes.
    bool in_alphabet = true;
    for (size_t i = 0; i < token.size() && in_alphabet;) {
      size_t len = utf8_sequence_length(token, i);
      in_alphabet = char_to_byte(utf8_decode_at(token, i, len)).has_value();
      i += len;
    }
    if (in_alphabet) impl_.model.add_token(bytes, id);
  }
}

void Loader::load_merges(const json& merges) {
  if (!merges.is_array()) fail("model.merges", "expected an array, got " + std::string(merges.type_name()));
  int rank = 0;
  for (const json& m : merges) {
    std::string field = "model.merges[" + std::to_string(rank) + "]";
    std::string a, b;
    if (m.is_string()) {
      std::string s = string_of(m, field);
      size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        fail(field, "expected two tokens separated by one space, got \"" + s + "\"");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2) {
      a = string_of(m[0], field + "[0]");
      b = string_of(m[1], field + "[1]");
    } else {
      fail(field, "expected \"a b\" or [\"a\", \"b\"], got " + std::string(m.type_name()));
    }
    int left = vocab_id(a, field);
    int right = vocab_id(b, field);
    int merged = vocab_id(a + b, field);
    impl_.model.add_merge(left, right, merged, rank);
    ++rank;
  }
}

void Loader::load_added_tokens(const json& added) {
  if (!added.is_array()) fail("added_tokens", "expected an array, got " + std::string(added.type_name()));
  for (size_t i = 0; i < added.size(); ++i) {
    std::string field = "added_tokens[" + std::to_string(i) + "]";
    const json& t = added[i];
    if (!t.is_object()) fail(field, "expected an object, got " + std::string(t.type_name()));
    AddedToken token;
    token.id = id_of(require(t, field, "id"), field + ".id");
    token.content = string_of(require(t, field, "content"), field + ".content");
    if (token.content.empty()) fail(field + ".content", "empty");
    token.special = flag(t, field, "special", false);
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      if (flag(t, field, key, false)) fail(field + "." + key, "true is not supported");
    flag(t, field, "normalized", false);
    set_id_bytes(token.id, byte_level_decode(token.content));
    impl_.added.push_back(std::move(token));
  }
  for (size_t k = 0; k < impl_.added.size(); ++k)
    impl_.added_by_byte[static_cast<uint8_t>(impl_.added[k].content[0])].push_back(k);
  for (auto& bucket : impl_.added_by_byte) {
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](size_t x, size_t y) { return impl_.added[x].content.size() > impl_.added[y].content.size(); });
  }
}

void Loader::load_normalizer(const json& n, const std::string& field, bool nested) {
  if (!n.is_object()) fail(field, "expected an object or null, got " + std::string(n.type_name()));
  std::string type = string_of(require(n, field, "type"), field + ".type");
  if (type == "NFC") return impl_.normalizers.push_back(NormalForm::kNFC);
  if (type == "NFD") return impl_.normalizers.push_back(NormalForm::kNFD);
  if (type == "NFKC") return impl_.normalizers.push_back(NormalForm::kNFKC);
  if (type == "NFKD") return impl_.normalizers.push_back(NormalForm::kNFKD);
  if (type == "Sequence" && !nested) {
    const json& list = require(n, field, "normalizers");
    if (!list.is_array()) fail(field + ".normalizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i)
      load_normalizer(list[i], field + ".normalizers[" + std::to_string(i) + "]", true);
    return;
  }
  fail(field + ".type", "unsupported normalizer \"" + type + "\" (supported: NFC, NFD, NFKC, NFKD, Sequence)");
}

void Loader::load_pre_tokenizer(const json& p, const std::string& field, bool nested) {
  if (!p.is_object()) fail(field, "expected an object, got " + std::string(p.type_name()));
  std::string type = string_of(require(p, field, "type"), field + ".type");
  auto& steps = impl_.pre_tokenizer;
  if (type == "Sequence" && !nested) {
    const json& list = require(p, field, "pretokenizers");
    if (!list.is_array()) fail(field + ".pretokenizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i)
      load_pre_tokenizer(list[i], field + ".pretokenizers[" + std::to_string(i) + "]", true);
  } else if (type == "ByteLevel") {
    has_byte_level_ = true;
    if (flag(p, field, "add_prefix_space", false)) {
      if (!steps.empty()) fail(field + ".add_prefix_space", "supported on the first step only");
      impl_.add_prefix_space = true;
    }
    if (flag(p, field, "use_regex", true)) steps.push_back({.kind = PreTokenizerStep::Kind::kByteLevelRegex});
  } else if (type == "Digits") {
    steps.push_back(
        {.kind = PreTokenizerStep::Kind::kDigits, .individual_digits = flag(p, field, "individual_digits", false)});
  } else if (type == "Split") {
    const json& pattern = require(p, field, "pattern");
    const json* regex = pattern.is_object() ? member(pattern, "Regex") : nullptr;
    if (regex == nullptr) fail(field + ".pattern", "expected {\"Regex\": ...}, got " + pattern.dump());
    std::string r = string_of(*regex, field + ".pattern.Regex");
    auto known = known_split_pattern(r);
    if (!known)
      fail(field + ".pattern.Regex",
           "unsupported pattern \"" + r + "\" (known: the GPT-2, Llama 3 and Qwen 2 patterns)");
    const json* behavior = member(p, "behavior");
    if (behavior == nullptr || string_of(*behavior, field + ".behavior") != "Isolated")
      fail(field + ".behavior", "only \"Isolated\" is supported");
    if (flag(p, field, "invert", false)) fail(field + ".invert", "true is not supported");
    steps.push_back({.kind = PreTokenizerStep::Kind::kSplit, .pattern = *known});
  } else {
    fail(field + ".type", "unsupported pre-tokenizer \"" + type + "\" (supported: ByteLevel, Digits, Split, Sequence)");
  }
}

void Loader::load_decoder(const json& d) {
  if (!d.is_object()) fail("decoder", "expected an object, got " + std::string(d.type_name()));
  std::string type = string_of(require(d, "decoder", "type"), "decoder.type");
  if (type != "ByteLevel") fail("decoder.type", "unsupported decoder \"" + type + "\" (only ByteLevel)");
}

}  // namespace

void load_tokenizer_json(std::string_view text, std::string_view origin, Tokenizer::Impl& impl) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw TokenizerError(std::string(origin) + ": not valid JSON: " + e.what());
  }
  Loader(origin, impl).load(root);
}

}  // namespace meganeura::text
