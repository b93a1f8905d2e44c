// Sampling: the filtered distributions against a long double reference written here from the
// Hugging Face semantics, seeded draws against the reference, determinism, stop strings and
// option validation.
#include "text/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using meganeura::text::Sampler;
using meganeura::text::SamplingOptions;
using meganeura::text::StopChecker;
using meganeura::text::StopCriteria;

namespace {

// Reference: penalty, temperature, top-k, top-p, in long double, written from the definitions
// (threshold tests over the whole vocabulary rather than a sort-and-cut).
std::vector<long double> reference(const std::vector<float>& logits, const std::vector<int>& prev,
                                   const SamplingOptions& o) {
  const size_t n = logits.size();
  std::vector<long double> x(logits.begin(), logits.end());
  for (size_t i = 0; i < n; ++i) {
    const bool seen = std::find(prev.begin(), prev.end(), static_cast<int>(i)) != prev.end();
    if (seen) x[i] = x[i] > 0 ? x[i] / o.repetition_penalty : x[i] * o.repetition_penalty;
  }
  for (auto& v : x) v /= static_cast<long double>(o.temperature);
  std::vector<bool> keep(n, true);
  if (o.top_k > 0) {
    // Token i survives if fewer than k tokens are strictly larger.
    for (size_t i = 0; i < n; ++i) {
      size_t larger = 0;
      for (size_t j = 0; j < n; ++j) larger += x[j] > x[i];
      keep[i] = larger < static_cast<size_t>(o.top_k);
    }
  }
  auto norm = [&] {
    long double z = 0;
    for (size_t i = 0; i < n; ++i)
      if (keep[i]) z += std::exp(x[i]);
    std::vector<long double> p(n, 0);
    for (size_t i = 0; i < n; ++i)
      if (keep[i]) p[i] = std::exp(x[i]) / z;
    return p;
  };
  std::vector<long double> p = norm();
  if (o.top_p < 1) {
    // Token i survives if the mass of tokens strictly more probable than it (or equally
    // probable with a lower index) is still below p.
    std::vector<bool> k2 = keep;
    for (size_t i = 0; i < n; ++i) {
      long double above = 0;
      for (size_t j = 0; j < n; ++j)
        if (p[j] > p[i] || (p[j] == p[i] && j < i)) above += p[j];
      k2[i] = keep[i] && above < static_cast<long double>(o.top_p);
    }
    keep = k2;
    p = norm();
  }
  return p;
}

const std::vector<float> kLogits = {1.5f, -0.25f, 3.0f, 0.75f, 2.25f, -1.0f, 0.0f, 2.0f, 1.0f, -2.5f};

void expect_matches(const std::vector<double>& got, const std::vector<long double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    // The kept set exactly; probabilities to 1e-6 relative: the sampler works in double
    // (rounding ~1e-15 per operation over ~10 terms), so 1e-6 is loose by orders of magnitude
    // yet far tighter than any mistake in a step (which changes probabilities by percent).
    EXPECT_EQ(got[i] > 0, want[i] > 0) << "token " << i;
    EXPECT_NEAR(got[i], static_cast<double>(want[i]), 1e-6 * static_cast<double>(want[i]) + 1e-300) << "token " << i;
  }
}

struct Case {
  SamplingOptions o;
  std::vector<int> prev;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  auto add = [&](float t, int k, float p, float pen, std::vector<int> prev) {
    SamplingOptions o;
    o.temperature = t;
    o.top_k = k;
    o.top_p = p;
    o.repetition_penalty = pen;
    c.push_back({o, std::move(prev)});
  };
  add(1.0f, 0, 1.0f, 1.0f, {});
  add(0.7f, 0, 1.0f, 1.0f, {});
  add(1.3f, 3, 1.0f, 1.0f, {});
  add(1.0f, 0, 0.8f, 1.0f, {});
  add(0.5f, 5, 0.9f, 1.0f, {});
  add(1.0f, 0, 1.0f, 1.3f, {2, 5, 2, 4});
  add(0.9f, 4, 0.7f, 2.0f, {2, 9, 0});
  return c;
}

}  // namespace

TEST(Sampling, GreedyIsArgmaxLowestIndexOnTies) {
  SamplingOptions o;
  o.temperature = 0;
  Sampler s(o);
  EXPECT_EQ(s.sample(kLogits, {}), 2);
  const std::vector<float> tied = {0.f, 5.f, 1.f, 5.f, 5.f};
  EXPECT_EQ(s.sample(tied, {}), 1);
  // The repetition penalty applies before the argmax: 3.0/4 < 2.25.
  o.repetition_penalty = 4;
  Sampler p(o);
  EXPECT_EQ(p.sample(kLogits, std::vector<int>{2}), 4);
}

TEST(Sampling, FilteredDistributionsMatchReference) {
  for (const Case& c : cases()) {
    Sampler s(c.o);
    SCOPED_TRACE("t=" + std::to_string(c.o.temperature) + " k=" + std::to_string(c.o.top_k) +
                 " p=" + std::to_string(c.o.top_p) + " pen=" + std::to_string(c.o.repetition_penalty));
    expect_matches(s.probabilities(kLogits, c.prev), reference(kLogits, c.prev, c.o));
  }
}

TEST(Sampling, TopPKeepsAtLeastOneToken) {
  SamplingOptions o;
  o.top_p = 1e-6f;
  Sampler s(o);
  const std::vector<double> p = s.probabilities(kLogits, {});
  EXPECT_EQ(p[2], 1.0);
  EXPECT_EQ(std::count_if(p.begin(), p.end(), [](double v) { return v > 0; }), 1);
}

TEST(Sampling, DrawsFollowTheReference) {
  // 200,000 draws: each token's count is Binomial(N, p); we require it within 5 standard
  // deviations of N p (probability of a false failure < 1e-5 per token, and the test is
  // deterministic given the seed anyway). A token the reference filters out must never occur.
  const int n = 200000;
  for (const Case& c : cases()) {
    Sampler s(c.o);
    std::vector<long double> want = reference(kLogits, c.prev, c.o);
    std::vector<int> count(kLogits.size(), 0);
    for (int i = 0; i < n; ++i) ++count[static_cast<size_t>(s.sample(kLogits, c.prev))];
    for (size_t t = 0; t < want.size(); ++t) {
      const double p = static_cast<double>(want[t]);
      if (p == 0) {
        EXPECT_EQ(count[t], 0) << "token " << t;
        continue;
      }
      const double sigma = std::sqrt(n * p * (1 - p));
      EXPECT_NEAR(count[t], n * p, 5 * sigma + 1) << "token " << t;
    }
  }
}

TEST(Sampling, SameSeedSameSequenceDifferentSeedDifferent) {
  auto run = [](uint64_t seed) {
    SamplingOptions o;
    o.seed = seed;
    Sampler s(o);
    std::vector<int> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(kLogits, out));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
  // The raw bits of std::mt19937_64 are standardised and the draw uses them directly, so this
  // sequence is the same on every machine: pin its first tokens.
  const std::vector<int> a = run(42);
  EXPECT_EQ(std::vector<int>(a.begin(), a.begin() + 8), (std::vector<int>{4, 4, 4, 2, 7, 1, 4, 2}));
}

// A row's top `count` entries as Generator::feed_top_k gives them: largest first, NaN first,
// the lower index first among equals (written here with a stable sort).
void top_of(const std::vector<float>& row, size_t count, std::vector<float>& logits, std::vector<int32_t>& ids) {
  std::vector<int32_t> idx(row.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
    const float x = row[size_t(a)], y = row[size_t(b)];
    return std::isnan(x) ? !std::isnan(y) : !std::isnan(y) && x > y;
  });
  ids.assign(idx.begin(), idx.begin() + long(count));
  logits.clear();
  for (int32_t i : ids) logits.push_back(row[size_t(i)]);
}

// Drawing from the top top_k + 1 candidates gives the token sampling the full row gives, from
// the same draw, under every filter; a tie at the k-th value (frequent here: logits on a grid
// of quarters) leaves the choice to the full row without drawing.
TEST(Sampling, TopCandidatesDrawWhatTheFullRowDraws) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0, 2);
  int decided = 0, undecided = 0;
  for (float temperature : {0.6f, 1.0f, 1.7f})
    for (int k : {1, 5, 40})
      for (float top_p : {1.0f, 0.9f, 0.4f})
        for (float min_p : {0.0f, 0.05f}) {
          const SamplingOptions o{temperature, k, top_p, min_p, 1.0f, uint64_t(k * 31 + int(top_p * 10))};
          Sampler top(o), full(o);
          std::vector<float> row(1000), logits;
          std::vector<int32_t> ids;
          for (int step = 0; step < 40; ++step) {
            const bool grid = step % 2 == 1;
            for (float& v : row) v = grid ? std::round(d(rng) * 4) / 4 : d(rng);
            top_of(row, size_t(k) + 1, logits, ids);
            const std::optional<int> t = top.sample_top(logits, ids);
            if (t) {
              ++decided;
              ASSERT_EQ(*t, full.sample(row, {})) << "step " << step << " k " << k;
            } else {
              ++undecided;
              ASSERT_EQ(logits[size_t(k) - 1], logits[size_t(k)]) << "undecided without a tie at the k-th value";
              ASSERT_EQ(top.sample(row, {}), full.sample(row, {}));
            }
          }
        }
  EXPECT_GT(decided, 1500);
  EXPECT_GT(undecided, 20);
}

TEST(Sampling, TopCandidatesLeaveWhatTheyCannotDecide) {
  const std::vector<float> row = {0.5f, 3.0f, -1.0f, 2.0f, 2.5f, 0.0f};
  std::vector<float> logits;
  std::vector<int32_t> ids;
  top_of(row, 3, logits, ids);
  SamplingOptions o;
  o.top_k = 2;
  o.repetition_penalty = 1.2f;  // penalises ids the candidates cannot see
  EXPECT_FALSE(Sampler(o).sample_top(logits, ids));
  o.repetition_penalty = 1;
  o.top_k = 0;  // every token may be drawn
  EXPECT_FALSE(Sampler(o).sample_top(logits, ids));
  o.top_k = 3;  // no candidate beyond the k-th to rule out a tie
  EXPECT_FALSE(Sampler(o).sample_top(logits, ids));
  o.temperature = 0;  // greedy: the first candidate
  EXPECT_EQ(Sampler(o).sample_top(logits, ids), 1);
  const std::vector<float> nan_row = {1.0f, NAN, 2.0f, NAN};
  top_of(nan_row, 2, logits, ids);
  o.temperature = 1;
  o.top_k = 1;
  std::string top_error, full_error;
  try {
    Sampler(o).sample_top(logits, ids);
  } catch (const std::invalid_argument& e) {
    top_error = e.what();
  }
  try {
    Sampler(o).sample(nan_row, {});
  } catch (const std::invalid_argument& e) {
    full_error = e.what();
  }
  EXPECT_EQ(top_error, "sampling: logits[1] is NaN");
  EXPECT_EQ(top_error, full_error);
  EXPECT_THROW(Sampler(o).sample_top(std::vector<float>{1.0f}, std::vector<int32_t>{}), std::invalid_argument);
}

TEST(Sampling, BadOptionsAreRefused) {
  auto refused = [](SamplingOptions o, const std::string& needle) {
    try {
      Sampler s(o);
      ADD_FAILURE() << "accepted, expected an error naming " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  SamplingOptions o;
  o.temperature = -1;
  refused(o, "temperature");
  o = {};
  o.top_p = 0;
  refused(o, "top_p");
  o.top_p = 1.5f;
  refused(o, "top_p");
  o = {};
  o.top_k = -3;
  refused(o, "top_k must be >= 0 (0 = off), got -3");
  o = {};
  o.repetition_penalty = 0;
  refused(o, "repetition_penalty");
  o = {};
  o.min_p = 2;
  refused(o, "min_p");
  Sampler s(SamplingOptions{});
  std::vector<float> bad = kLogits;
  bad[3] = NAN;
  try {
    (void)s.sample(bad, {});
    ADD_FAILURE() << "NaN accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("logits[3] is NaN"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)s.sample(kLogits, std::vector<int>{10}), std::invalid_argument);
}

TEST(Stop, StopStringSpanningTokens) {
  StopChecker c({0, {}, {"\n\nUser:"}});
  EXPECT_FALSE(c.push(1, "Hello"));
  EXPECT_FALSE(c.push(2, " world\n"));
  EXPECT_EQ(c.ready(), "Hello world");  // the "\n" may start the stop string
  EXPECT_FALSE(c.push(3, "\nUs"));
  EXPECT_EQ(c.ready(), "Hello world");
  EXPECT_TRUE(c.push(4, "er: more"));
  EXPECT_EQ(c.text(), "Hello world");
  EXPECT_TRUE(c.stopped());
}

TEST(Stop, FalseStartIsReleased) {
  StopChecker c({0, {}, {"END"}});
  EXPECT_FALSE(c.push(1, "EN"));
  EXPECT_EQ(c.ready(), "");
  EXPECT_FALSE(c.push(2, "d E"));
  EXPECT_EQ(c.ready(), "ENd ");
  EXPECT_TRUE(c.push(3, "NDx"));
  EXPECT_EQ(c.text(), "ENd ");
}

TEST(Stop, TokenIdsAndMaxNewTokens) {
  StopChecker a({0, {7}, {}});
  EXPECT_FALSE(a.push(1, "a"));
  EXPECT_TRUE(a.push(7, "b"));
  StopChecker b({3, {}, {}});
  EXPECT_FALSE(b.push(1, "a"));
  EXPECT_FALSE(b.push(1, "a"));
  EXPECT_TRUE(b.push(1, "a"));
  EXPECT_EQ(b.text(), "aaa");
  EXPECT_THROW(StopChecker({-1, {}, {}}), std::invalid_argument);
  EXPECT_THROW(StopChecker({0, {}, {""}}), std::invalid_argument);
}
