// Byte-level BPE: the GPT-2 byte-to-character alphabet, and a model that merges the bytes of
// one pre-tokenized word by rank, with a cache of words already seen.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace meganeura::text {

// The character that stands for byte b in byte-level vocabularies.
uint32_t byte_to_char(uint8_t b);
// The byte a character stands for, or nothing for a character outside the alphabet.
std::optional<uint8_t> char_to_byte(uint32_t c);
// The bytes a vocabulary string stands for: each character mapped through the alphabet, or
// the string's own UTF-8 bytes when some character is outside it (as the decoder does).
std::string byte_level_decode(std::string_view token);

// Hashes strings and string views alike, so that lookups by view allocate nothing.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Registers a token by the bytes it stands for; the first id for given bytes is kept.
  void add_token(const std::string& bytes, int id);
  // The id of the token for these bytes, or -1.
  int find(std::string_view bytes) const;
  // Merge of two tokens into a third, with its rank (lower merges first). False when the
  // pair was already given a rank (the first one is kept).
  bool add_merge(int left, int right, int merged, int rank);
  void set_ignore_merges(bool on) { ignore_merges_ = on; }
  void set_unknown(int id) { unknown_ = id; }

  // Appends the ids of one word (bytes). Throws std::invalid_argument naming the byte when a
  // byte has no token and there is no unknown token.
  void encode_word(std::string_view word, std::vector<int>& out) const;

 private:
  void merge(std::string_view word, std::vector<int>& out) const;

  StringMap vocab_;
  std::unordered_map<uint64_t, std::pair<int, int>> merges_;  // (left, right) -> (rank, merged)
  int byte_token_[256];
  bool byte_token_set_ = false;
  bool ignore_merges_ = false;
  int unknown_ = -1;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int>, StringHash, std::equal_to<>> cache_;
};

}  // namespace meganeura::text
