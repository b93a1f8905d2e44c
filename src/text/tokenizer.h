// A Hugging Face tokenizer.json reader, encoder and decoder for byte-level BPE vocabularies
// (GPT-2, SmolLM2, Llama 3, Qwen).
//
// Supported, and checked field by field when loading (anything else is refused with an error
// naming the field):
//   model         type "BPE": vocab, merges ("a b" strings or [a, b] pairs), ignore_merges,
//                 unk_token; dropout null, byte_fallback false, no subword prefix or suffix.
//   added_tokens  special or not; matched in the raw text before anything else (leftmost,
//                 longest first); single_word, lstrip and rstrip must be false.
//   normalizer    null, NFC, NFD, NFKC, NFKD, or a Sequence of those.
//   pre_tokenizer ByteLevel (use_regex: the GPT-2 pattern; add_prefix_space), Digits, Split
//                 with the GPT-2, Llama 3 or Qwen 2 pattern and behavior "Isolated", or a
//                 Sequence of those; it must include a ByteLevel step.
//   decoder       ByteLevel.
// The post-processor only adds special tokens, which encode() never does; it is ignored.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace meganeura::text {

// A malformed or unsupported tokenizer.json, or input the tokenizer cannot encode. The
// message names the field (e.g. "tokenizer.json: model.merges[7]: ...").
class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Input limits, each refused with an error naming it: token ids (the largest real
// vocabularies hold about 260k tokens) and the size of a tokenizer.json file (real ones are
// 2 to 12 MB).
inline constexpr int64_t kMaxTokenId = (int64_t{1} << 21) - 1;
inline constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{256} << 20;

struct AddedToken {
  int id = 0;
  std::string content;
  bool special = false;
};

class Tokenizer {
 public:
  // A tokenizer.json, or the tokenizer a .gguf file holds (text/gguf_tokenizer.h).
  static Tokenizer from_file(const std::filesystem::path& path);
  // `origin` names the source in error messages.
  static Tokenizer from_json(std::string_view json, std::string_view origin = "tokenizer.json");

  // The ids of valid UTF-8 text. No special tokens are added; added tokens written in the
  // text become their ids.
  std::vector<int> encode(std::string_view text) const;
  // The text of ids; bytes that do not form valid UTF-8 become U+FFFD.
  std::string decode(std::span<const int> ids) const;
  // The bytes a token stands for.
  const std::string& token_bytes(int id) const;
  // One more than the largest id.
  size_t vocab_size() const;
  const std::vector<AddedToken>& added_tokens() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Decodes ids one at a time, as they are generated, into valid UTF-8: bytes that begin a
// character the next token may complete are held back until it comes.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  // The text that the id completes (possibly empty).
  std::string push(int id);
  // What is still held back, as U+FFFD (nothing when the stream ended on a whole character).
  std::string finish();

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;
};

}  // namespace meganeura::text
