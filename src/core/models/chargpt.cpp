#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "meganeura/generate.h"
#include "meganeura/models.h"

namespace meganeura::models {

namespace {

void check(const CharGptConfig& c) {
  if (c.vocab < 2) throw std::invalid_argument("[chargpt] needs a vocabulary of at least 2 tokens");
  if (c.weights != DType::f32 && !dtype_is_block(c.weights)) {
    throw std::invalid_argument("[chargpt] weights in " + std::string(dtype_name(c.weights)) +
                                ": f32, q8_0 or q4_0 only");
  }
  if (c.dim % c.heads || c.heads % c.kv_heads) {
    throw std::invalid_argument("[chargpt] model dimension " + std::to_string(c.dim) + " does not split into " +
                                std::to_string(c.heads) + " heads (" + std::to_string(c.kv_heads) +
                                " key/value heads)");
  }
}

// A matrix with rows of `in` values held in c.weights' blocks.
bool quantised(const CharGptConfig& c, int64_t in) { return dtype_is_block(c.weights) && in % 32 == 0; }

// Generation's per-layer key/value caches and the absolute position of the first new token.
struct Cache {
  Tensor position;  // i32 [1]
  int64_t max_context = 0;
};

// Rotary embedding of [B, n, S, hd]: positions 0.. of the window without a cache, the new
// tokens' absolute positions with one.
Tensor rotate(Tensor t, const CharGptConfig& c, const Cache* cache) {
  return cache ? rope_at(t, cache->position, c.rope_theta) : rope(t, c.rope_theta);
}

// Attention of one block over rotated q [B, heads, S, hd], k and v [B, kv_heads, S, hd]. With a
// cache the new keys and values are written at their absolute positions and each query sees
// the last c.seq positions, as far back as a training window reaches.
Tensor attend(Graph& g, const CharGptConfig& c, const std::string& p, Tensor q, Tensor k, Tensor v,
              const Cache* cache) {
  if (cache == nullptr) return attention(q, k, v, true);
  const Shape shape{k.dim(0), c.kv_heads, cache->max_context, k.dim(3)};
  Tensor kc = g.state(p + "key_cache", shape), vc = g.state(p + "value_cache", shape);
  Tensor kn = kv_cache_write(kc, k, cache->position), vn = kv_cache_write(vc, v, cache->position);
  g.assign(kc, kn);
  g.assign(vc, vn);
  return cached_attention(q, kn, vn, cache->position, c.seq);
}

// The blocks and the final norm: ids [B, S] -> hidden states [B, S, D]; also returns the
// embedding, which the output projection shares.
std::pair<Tensor, Tensor> decoder(Graph& g, Tensor ids, const CharGptConfig& c, const Cache* cache) {
  check(c);
  const int64_t b = ids.dim(0), s = ids.dim(1), hd = c.dim / c.heads;
  const double std_in = 1.0 / std::sqrt(double(c.dim));
  const double std_out = std_in / std::sqrt(2.0 * double(c.layers));  // residual branches
  // Tied: std 1/sqrt(dim) keeps the initial logits of unit scale (loss near ln(vocab)).
  Tensor emb = g.parameter("tok_embedding", {c.vocab, c.dim}, Init{Init::normal, std_in},
                           quantised(c, c.dim) ? c.weights : DType::f32);
  Tensor x = embedding(emb, ids);          // [B, S, D]
  auto heads = [&](Tensor t, int64_t n) {  // [B, S, n*hd] -> [B, n, S, hd]
    return permute(reshape(t, {b, s, n, hd}), {0, 2, 1, 3});
  };
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    // h [.., in] times the projection `name` [in, out] (held [out, in] in c.weights' blocks).
    auto project = [&](Tensor h, const std::string& name, int64_t in, int64_t out, double std) {
      if (!quantised(c, in)) return matmul(h, g.parameter(p + name, {in, out}, Init{Init::normal, std}));
      return matmul_q(h, g.parameter(p + name, {out, in}, Init{Init::normal, std}, c.weights));
    };
    Tensor h = rms_norm(x, g.parameter(p + "attn_norm", {c.dim}, Init{Init::ones}));
    Tensor q = rotate(heads(project(h, "wq", c.dim, c.dim, std_in), c.heads), c, cache);
    Tensor k = rotate(heads(project(h, "wk", c.dim, c.kv_heads * hd, std_in), c.kv_heads), c, cache);
    Tensor v = heads(project(h, "wv", c.dim, c.kv_heads * hd, std_in), c.kv_heads);
    Tensor a = reshape(permute(attend(g, c, p, q, k, v, cache), {0, 2, 1, 3}), {b, s, c.dim});
    x = x + project(a, "wo", c.dim, c.dim, std_out);
    h = rms_norm(x, g.parameter(p + "ffn_norm", {c.dim}, Init{Init::ones}));
    Tensor f = swiglu(project(h, "w_gate", c.dim, c.ffn, std_in), project(h, "w_up", c.dim, c.ffn, std_in));
    x = x + project(f, "w_down", c.ffn, c.dim, std_out / std::sqrt(double(c.ffn) / double(c.dim)));
  }
  return {rms_norm(x, g.parameter("final_norm", {c.dim}, Init{Init::ones})), emb};
}

// The tied output projection: x [.., dim] times the embedding's transpose.
Tensor head(Tensor x, Tensor emb, const CharGptConfig& c) {
  return quantised(c, c.dim) ? matmul_q(x, emb) : matmul(x, emb, false, true);
}

}  // namespace

Tensor chargpt(Graph& g, Tensor ids, const CharGptConfig& c) {
  auto [x, emb] = decoder(g, ids, c, nullptr);
  return head(x, emb, c);
}

Tensor chargpt_cached(Graph& g, Tensor ids, Tensor position, int64_t max_context, const CharGptConfig& c) {
  if (max_context < ids.dim(1)) {
    throw std::invalid_argument("[chargpt] max_context " + std::to_string(max_context) + " is shorter than the " +
                                std::to_string(ids.dim(1)) + " tokens of one run");
  }
  const Cache cache{position, max_context};
  auto [x, emb] = decoder(g, ids, c, &cache);
  const int64_t s = ids.dim(1);
  Tensor last = reshape(slice_axis(x, 1, s - 1, s), {ids.dim(0), c.dim});  // the last new token
  return head(last, emb, c);
}

}  // namespace meganeura::models

namespace meganeura {

CharGptGenerator::CharGptGenerator(Session& session, const models::CharGptConfig& config, int64_t keep,
                                   int64_t prefill_chunk)
    : session_(session), config_(config), keep_(keep < 0 ? default_keep(config) : keep) {
  if (keep_ >= config.seq) {
    throw std::invalid_argument("[chargpt] keep " + std::to_string(keep_) + " must be shorter than the " +
                                std::to_string(config.seq) + "-token context");
  }
  if (prefill_chunk <= 0 || !std::has_single_bit(uint64_t(prefill_chunk))) {
    throw std::invalid_argument("[chargpt] prefill_chunk must be a power of two, got " + std::to_string(prefill_chunk));
  }
  for (int64_t n = std::min<int64_t>(prefill_chunk, int64_t(std::bit_floor(uint64_t(config.seq)))); n >= 1; n /= 2) {
    Graph g;
    Tensor ids = g.input("gen_ids." + std::to_string(n), {1, n}, DType::i32);
    Tensor position = g.input("gen_position", {1}, DType::i32);
    g.output("gen_logits." + std::to_string(n), models::chargpt_cached(g, ids, position, config.seq, config));
    chunks_.push_back({n, session_.add(g)});
  }
}

const std::vector<float>& CharGptGenerator::start(std::span<const int32_t> prompt) {
  if (prompt.empty()) throw std::invalid_argument("[chargpt] the prompt needs at least one token");
  check(prompt);
  const int64_t n = int64_t(prompt.size()), seq = config_.seq;
  const int64_t kept = n <= seq ? n : keep_ + 1 + (n - seq - 1) % (seq - keep_);
  context_.assign(prompt.end() - kept, prompt.end());
  restarts_ = 0;
  feed(context_, 0);
  return logits_;
}

const std::vector<float>& CharGptGenerator::next(int32_t token) {
  if (context_.empty()) throw std::logic_error("[chargpt] next before start");
  check(std::span<const int32_t>(&token, 1));
  if (int64_t(context_.size()) < config_.seq) {
    context_.push_back(token);
    feed(std::span<const int32_t>(&context_.back(), 1), int64_t(context_.size()) - 1);
  } else {
    context_.erase(context_.begin(), context_.end() - keep_);
    context_.push_back(token);
    ++restarts_;
    feed(context_, 0);
  }
  return logits_;
}

void CharGptGenerator::check(std::span<const int32_t> ids) const {
  for (int32_t id : ids) {
    if (id < 0 || id >= config_.vocab) {
      throw std::invalid_argument("[chargpt] token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                  std::to_string(config_.vocab) + ")");
    }
  }
}

void CharGptGenerator::feed(std::span<const int32_t> ids, int64_t position) {
  for (size_t done = 0; done < ids.size();) {
    const Chunk& c = *std::find_if(chunks_.begin(), chunks_.end(),
                                   [&](const Chunk& k) { return size_t(k.tokens) <= ids.size() - done; });
    const std::string n = std::to_string(c.tokens);
    session_.set("gen_ids." + n, ids.subspan(done, size_t(c.tokens)));
    session_.set("gen_position", std::vector<int32_t>{int32_t(position + int64_t(done))});
    session_.run(c.program);
    logits_ = session_.get("gen_logits." + n);
    done += size_t(c.tokens);
  }
}

}  // namespace meganeura

namespace meganeura::models {

const std::string& builtin_text() {
  static const std::string text =
      "The river wakes before the town does. At first light the water is the colour of slate, "
      "and the mist sits on it like a sheet left out overnight. The ferryman counts the ropes, "
      "checks the lamps, and waits for the bell. When the bell rings, the first cart rolls down "
      "to the landing, and the day begins.\n"
      "In the morning the bakers open their doors and the smell of bread runs along the street. "
      "Children carry baskets to the market, and the market fills with voices: apples, onions, "
      "salt fish, warm milk, cheap cloth, good cloth, thread and needles. The sellers call the "
      "prices and the buyers call them back, lower, and both of them smile.\n"
      "At noon the sun stands over the bridge. The stones are warm, the dogs sleep in the shade, "
      "and the old men play at cards under the plane trees. Nobody hurries at noon. The clock "
      "on the tower strikes twelve, and then, a little late, the clock on the church strikes "
      "twelve as well, and everyone agrees that the church clock is wrong.\n"
      "In the afternoon the wind turns and comes up from the sea. It brings the smell of rain "
      "and the cry of gulls. The ferry crosses and crosses again. The water grows dark and the "
      "waves grow short and quick. The ferryman watches the clouds and says nothing, because "
      "he has seen many storms and most of them pass.\n"
      "In the evening the lamps are lit along the quay. The boats come home one by one, low in "
      "the water, and the nets are laid out on the stones to dry. The families eat together, "
      "the windows glow, and somebody plays a fiddle in the square. The tune is old and simple, "
      "and the children who dance to it will teach it to their own children.\n"
      "At night the river keeps moving. It carries the leaves and the light of the lamps and the "
      "sound of the bell out past the last houses, past the fields and the mill, down to the "
      "sea. The town sleeps. The ferryman sleeps. The river does not sleep, and in the morning "
      "it wakes before the town does.\n";
  return text;
}

int32_t Vocabulary::id(char ch) const {
  auto pos = chars.find(ch);
  if (pos == std::string::npos)
    throw std::invalid_argument(std::string("[chargpt] character '") + ch + "' not in the vocabulary");
  return int32_t(pos);
}
std::vector<int32_t> Vocabulary::encode(const std::string& s) const {
  std::vector<int32_t> out;
  for (char ch : s) out.push_back(id(ch));
  return out;
}
std::string Vocabulary::decode(const std::vector<int32_t>& ids) const {
  std::string s;
  for (int32_t i : ids) s += chars.at(size_t(i));
  return s;
}
Vocabulary vocabulary_of(const std::string& text) {
  std::string chars = text;
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  return Vocabulary{chars};
}

}  // namespace meganeura::models
