#include "text/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "text/gguf_tokenizer.h"
#include "text/tokenizer_impl.h"
#include "text/utf8.h"

namespace meganeura::text {

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  if (path.extension() == ".gguf" && !std::filesystem::is_directory(path)) {
    try {
      return tokenizer_from_gguf(io::read_gguf(path));
    } catch (const io::Error& e) {
      throw TokenizerError(std::string("tokenizer: ") + e.what());
    }
  }
  std::error_code ec;
  uint64_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxTokenizerFileBytes)
    throw TokenizerError("tokenizer: " + path.string() + " is " + std::to_string(size) +
                         " bytes, over kMaxTokenizerFileBytes (" + std::to_string(kMaxTokenizerFileBytes) + ")");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw TokenizerError("tokenizer: cannot open " + path.string());
  std::ostringstream s;
  s << f.rdbuf();
  if (!f && !f.eof()) throw TokenizerError("tokenizer: cannot read " + path.string());
  return from_json(s.str(), path.string());
}

Tokenizer Tokenizer::from_json(std::string_view json, std::string_view origin) {
  auto impl = std::make_shared<Impl>();
  load_tokenizer_json(json, origin, *impl);
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::encode_segment(std::string_view segment, std::vector<int>& out) const {
  if (segment.empty()) return;
  std::string_view text = segment;
  std::string buffer;
  if (!normalizers.empty() || add_prefix_space) {
    buffer.assign(segment);
    for (NormalForm f : normalizers) buffer = normalize(buffer, f);
    if (add_prefix_space && buffer[0] != ' ') buffer.insert(0, 1, ' ');
    text = buffer;
  }
  thread_local CodePoints cps;
  thread_local std::vector<Piece> pieces;
  cps.assign(text);
  pre_tokenize(cps, pre_tokenizer, pieces);
  try {
    for (Piece p : pieces) model.encode_word(text.substr(p.first, p.second - p.first), out);
  } catch (const std::invalid_argument& e) {
    throw TokenizerError(e.what());
  }
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  if (text.size() > UINT32_MAX)  // code point offsets are 32-bit
    throw TokenizerError("tokenizer: input of " + std::to_string(text.size()) + " bytes is over 4 GiB");
  size_t bad = utf8_first_invalid(text);
  if (bad != text.size()) throw TokenizerError("tokenizer: input is not valid UTF-8 at byte " + std::to_string(bad));
  std::vector<int> ids;
  ids.reserve(text.size() / 3 + 1);
  size_t start = 0;  // start of the text not yet encoded
  size_t i = 0;
  while (i < text.size()) {
    const auto& candidates = impl_->added_by_byte[static_cast<uint8_t>(text[i])];
    const AddedToken* hit = nullptr;
    for (size_t k : candidates) {
      const std::string& c = impl_->added[k].content;
      if (c.size() <= text.size() - i && std::memcmp(text.data() + i, c.data(), c.size()) == 0) {
        hit = &impl_->added[k];
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    impl_->encode_segment(text.substr(start, i - start), ids);
    ids.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  impl_->encode_segment(text.substr(start), ids);
  return ids;
}

const std::string& Tokenizer::token_bytes(int id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_bytes.size() || impl_->id_bytes[id].empty())
    throw TokenizerError("tokenizer: id " + std::to_string(id) + " is not in the vocabulary");
  return impl_->id_bytes[id];
}

std::string Tokenizer::decode(std::span<const int> ids) const {
  std::string bytes;
  for (int id : ids) bytes += token_bytes(id);
  return utf8_lossy(bytes);
}

size_t Tokenizer::vocab_size() const { return impl_->id_bytes.size(); }

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

std::string StreamDecoder::push(int id) {
  pending_ += tokenizer_->token_bytes(id);
  size_t keep = utf8_incomplete_tail(pending_);
  std::string out = utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace meganeura::text
