#include "text/bpe.h"

#include <array>
#include <queue>
#include <stdexcept>

#include "text/utf8.h"

namespace meganeura::text {

namespace {

// Words this long or longer are not cached; the cache is emptied when it holds this many.
constexpr size_t kMaxCachedWord = 256;
constexpr size_t kMaxCacheEntries = 1 << 16;

struct Alphabet {
  std::array<uint32_t, 256> to_char{};
  std::unordered_map<uint32_t, uint8_t> to_byte;
  Alphabet() {
    // Printable Latin-1 bytes stand for themselves; the rest take 256, 257, ... in order.
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      to_char[b] = printable ? b : next++;
      to_byte[to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

uint64_t pair_key(int left, int right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Symbol {
  int id;
  int prev, next;
  bool alive;
};

struct Candidate {
  int rank, pos, right, left_id, right_id, merged;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

uint32_t byte_to_char(uint8_t b) { return alphabet().to_char[b]; }

std::optional<uint8_t> char_to_byte(uint32_t c) {
  const auto& m = alphabet().to_byte;
  auto it = m.find(c);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

std::string byte_level_decode(std::string_view token) {
  std::string out;
  size_t i = 0;
  while (i < token.size()) {
    size_t len = utf8_sequence_length(token, i);
    if (len == 0) return std::string(token);
    auto b = char_to_byte(utf8_decode_at(token, i, len));
    if (!b) return std::string(token);
    out += static_cast<char>(*b);
    i += len;
  }
  return out;
}

void BpeModel::add_token(const std::string& bytes, int id) {
  if (!byte_token_set_) {
    for (int& t : byte_token_) t = -1;
    byte_token_set_ = true;
  }
  auto [it, inserted] = vocab_.emplace(bytes, id);
  if (inserted && bytes.size() == 1) byte_token_[static_cast<uint8_t>(bytes[0])] = id;
}

int BpeModel::find(std::string_view bytes) const {
  auto it = vocab_.find(bytes);
  return it == vocab_.end() ? -1 : it->second;
}

bool BpeModel::add_merge(int left, int right, int merged, int rank) {
  return merges_.emplace(pair_key(left, right), std::make_pair(rank, merged)).second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int>& out) const {
  if (word.empty()) return;
  if (ignore_merges_ || word.size() == 1) {
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  bool cacheable = word.size() < kMaxCachedWord;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t start = out.size();
  merge(word, out);
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int>(out.begin() + static_cast<std::ptrdiff_t>(start), out.end()));
  }
}

void BpeModel::merge(std::string_view word, std::vector<int>& out) const {
  std::vector<Symbol> sym(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    int id = byte_token_set_ ? byte_token_[static_cast<uint8_t>(word[i])] : -1;
    if (id < 0) id = unknown_;
    if (id < 0)
      throw std::invalid_argument("tokenizer: no token for byte 0x" +
                                  std::string(1, "0123456789abcdef"[static_cast<uint8_t>(word[i]) >> 4]) +
                                  std::string(1, "0123456789abcdef"[static_cast<uint8_t>(word[i]) & 15]) +
                                  " and no unknown token (model.unk_token)");
    sym[i] = {id, static_cast<int>(i) - 1, i + 1 < word.size() ? static_cast<int>(i) + 1 : -1, true};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto offer = [&](int pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    int right = sym[pos].next;
    auto it = merges_.find(pair_key(sym[pos].id, sym[right].id));
    if (it != merges_.end()) heap.push({it->second.first, pos, right, sym[pos].id, sym[right].id, it->second.second});
  };
  for (size_t i = 0; i + 1 < word.size(); ++i) offer(static_cast<int>(i));
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& l = sym[c.pos];
    if (!l.alive || l.next != c.right || l.id != c.left_id || !sym[c.right].alive || sym[c.right].id != c.right_id)
      continue;  // stale: one side has merged since
    l.id = c.merged;
    sym[c.right].alive = false;
    l.next = sym[c.right].next;
    if (l.next >= 0) sym[l.next].prev = c.pos;
    offer(l.prev);
    offer(c.pos);
  }
  for (int i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace meganeura::text
