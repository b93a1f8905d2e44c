#include "text/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace meganeura::text {

namespace {

std::string num(double v) { return std::to_string(v); }

void apply_penalty(std::vector<double>& x, std::span<const int> previous, double penalty) {
  std::vector<bool> seen(x.size(), false);
  for (int id : previous) {
    if (id < 0 || static_cast<size_t>(id) >= x.size())
      throw std::invalid_argument("sampling: previous token id " + std::to_string(id) +
                                  " is outside the vocabulary of " + std::to_string(x.size()));
    seen[static_cast<size_t>(id)] = true;
  }
  if (penalty == 1.0) return;
  for (size_t i = 0; i < x.size(); ++i)
    if (seen[i]) x[i] = x[i] > 0 ? x[i] / penalty : x[i] * penalty;
}

// Indices sorted by descending value, lowest index first among equals.
std::vector<size_t> order(const std::vector<double>& x) {
  std::vector<size_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return x[a] > x[b]; });
  return idx;
}

std::vector<double> softmax(const std::vector<double>& x, const std::vector<bool>& keep) {
  double mx = -INFINITY;
  for (size_t i = 0; i < x.size(); ++i)
    if (keep[i]) mx = std::max(mx, x[i]);
  std::vector<double> p(x.size(), 0.0);
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (keep[i] && x[i] > -INFINITY) sum += p[i] = std::exp(x[i] - mx);
  for (double& v : p) v /= sum;
  return p;
}

// The distribution over the kept entries, then top-p and min-p (idx: x's order, largest first).
std::vector<double> nucleus(const std::vector<double>& x, std::vector<bool>& keep, const std::vector<size_t>& idx,
                            const SamplingOptions& o) {
  std::vector<double> p = softmax(x, keep);
  if (o.top_p < 1) {
    // Keep the most probable tokens until the cumulative probability reaches top_p.
    double cum = 0;
    size_t r = 0;
    for (; r < idx.size(); ++r) {
      cum += p[idx[r]];
      if (cum >= o.top_p) break;
    }
    for (size_t s = r + 1; s < idx.size(); ++s) keep[idx[s]] = false;
    p = softmax(x, keep);
  }
  if (o.min_p > 0) {
    const double floor = o.min_p * p[idx[0]];
    for (size_t i = 0; i < x.size(); ++i)
      if (p[i] < floor) keep[i] = false;
    p = softmax(x, keep);
  }
  return p;
}

// The entry of p (in its order) a uniform draw u in [0, 1) falls on.
size_t draw(const std::vector<double>& p, double u) {
  double cum = 0;
  size_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    last = i;
    cum += p[i];
    if (u < cum) return last;
  }
  return last;
}

}  // namespace

void validate(const SamplingOptions& o) {
  if (!(o.temperature >= 0) || std::isinf(o.temperature))
    throw std::invalid_argument("sampling: temperature must be finite and >= 0 (0 = greedy), got " +
                                num(o.temperature));
  if (o.top_k < 0)
    throw std::invalid_argument("sampling: top_k must be >= 0 (0 = off), got " + std::to_string(o.top_k));
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw std::invalid_argument("sampling: top_p must be in (0, 1] (1 = off), got " + num(o.top_p));
  if (!(o.min_p >= 0 && o.min_p <= 1))
    throw std::invalid_argument("sampling: min_p must be in [0, 1] (0 = off), got " + num(o.min_p));
  if (!(o.repetition_penalty > 0) || std::isinf(o.repetition_penalty))
    throw std::invalid_argument("sampling: repetition_penalty must be finite and > 0 (1 = off), got " +
                                num(o.repetition_penalty));
}

Sampler::Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) { validate(options_); }

std::vector<double> Sampler::probabilities(std::span<const float> logits, std::span<const int> previous) const {
  if (logits.empty()) throw std::invalid_argument("sampling: logits are empty");
  std::vector<double> x(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) throw std::invalid_argument("sampling: logits[" + std::to_string(i) + "] is NaN");
    x[i] = logits[i];
  }
  apply_penalty(x, previous, options_.repetition_penalty);
  if (options_.temperature == 0) {  // greedy: the first largest, no sort of the vocabulary
    const size_t best = size_t(std::max_element(x.begin(), x.end()) - x.begin());
    if (!(x[best] > -INFINITY)) throw std::invalid_argument("sampling: every logit is -inf");
    std::vector<double> p(x.size(), 0.0);
    p[best] = 1.0;
    return p;
  }
  const std::vector<size_t> idx = order(x);
  if (!(x[idx[0]] > -INFINITY)) throw std::invalid_argument("sampling: every logit is -inf");
  std::vector<bool> keep(x.size(), false);
  for (double& v : x) v /= options_.temperature;
  size_t k = x.size();
  if (options_.top_k > 0) k = std::min(k, static_cast<size_t>(options_.top_k));
  // Ties at the k-th value are kept, as HF's `logits < topk.values[-1]` test does.
  for (size_t r = 0; r < x.size(); ++r) keep[idx[r]] = r < k || x[idx[r]] == x[idx[k - 1]];
  return nucleus(x, keep, idx, options_);
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }  // the top 53 bits

int Sampler::sample(std::span<const float> logits, std::span<const int> previous) {
  const std::vector<double> p = probabilities(logits, previous);
  return static_cast<int>(draw(p, uniform()));
}

std::optional<int> Sampler::sample_top(std::span<const float> logits, std::span<const int32_t> ids) {
  if (logits.empty() || logits.size() != ids.size()) {
    throw std::invalid_argument("sampling: " + std::to_string(logits.size()) + " candidate logits for " +
                                std::to_string(ids.size()) + " ids");
  }
  // NaN comes first, the lowest such id first: the entry probabilities() names.
  if (std::isnan(logits[0])) throw std::invalid_argument("sampling: logits[" + std::to_string(ids[0]) + "] is NaN");
  if (!(logits[0] > -INFINITY)) throw std::invalid_argument("sampling: every logit is -inf");
  if (options_.repetition_penalty != 1) return std::nullopt;
  if (options_.temperature == 0) return ids[0];
  const size_t k = static_cast<size_t>(options_.top_k);
  const double t = options_.temperature;
  if (k == 0 || k >= logits.size() || double(logits[k - 1]) / t == double(logits[k]) / t) return std::nullopt;
  // The k kept candidates in vocabulary order, as probabilities() walks the row.
  std::vector<size_t> by_id(k);
  std::iota(by_id.begin(), by_id.end(), size_t{0});
  std::sort(by_id.begin(), by_id.end(), [&](size_t a, size_t b) { return ids[a] < ids[b]; });
  std::vector<double> x(k);
  for (size_t j = 0; j < k; ++j) x[j] = double(logits[by_id[j]]) / t;
  std::vector<bool> keep(k, true);
  const std::vector<double> p = nucleus(x, keep, order(x), options_);
  return ids[by_id[draw(p, uniform())]];
}

StopChecker::StopChecker(StopCriteria criteria) : criteria_(std::move(criteria)) {
  if (criteria_.max_new_tokens < 0)
    throw std::invalid_argument("stop criteria: max_new_tokens must be >= 0, got " +
                                std::to_string(criteria_.max_new_tokens));
  for (const std::string& s : criteria_.stop_strings)
    if (s.empty()) throw std::invalid_argument("stop criteria: a stop string is empty");
}

bool StopChecker::push(int token, std::string_view decoded) {
  if (stopped_) return true;
  ++count_;
  const size_t before = text_.size();
  text_ += decoded;
  size_t cut = std::string::npos;
  for (const std::string& s : criteria_.stop_strings) {
    // Only matches that end in the new text; they may start in earlier text.
    const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
    cut = std::min(cut, text_.find(s, from));
  }
  if (cut != std::string::npos) {
    text_.resize(cut);
    stopped_ = true;
  }
  if (std::find(criteria_.stop_token_ids.begin(), criteria_.stop_token_ids.end(), token) !=
      criteria_.stop_token_ids.end())
    stopped_ = true;
  if (criteria_.max_new_tokens > 0 && count_ >= criteria_.max_new_tokens) stopped_ = true;
  return stopped_;
}

std::string_view StopChecker::ready() const {
  if (stopped_) return text_;
  size_t hold = 0;
  for (const std::string& s : criteria_.stop_strings)
    for (size_t n = std::min(s.size() - 1, text_.size()); n > hold; --n)
      if (text_.compare(text_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  return std::string_view(text_).substr(0, text_.size() - hold);
}

}  // namespace meganeura::text
