// Initial values of parameters, states and constants: drawn on first use, bit-identical to the
// documented serial stream whatever the thread count, and skipped for buffers written first.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "meganeura/session.h"

namespace meganeura {
namespace {

// The stream as documented in SessionOptions/initial_values, written out serially: splitmix64
// seeded by seed ^ FNV-1a(name), one Box-Muller pair (cosine branch) per normal value, one draw
// per uniform value.
struct SerialStream {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
};

uint64_t fnv(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::vector<double> expected(const std::string& name, uint64_t seed, Init init, size_t n) {
  SerialStream r{seed ^ fnv(name)};
  std::vector<double> v(n);
  for (double& x : v) {
    if (init.kind == Init::normal) {
      const double u1 = r.uniform(), u2 = r.uniform();
      x = init.a * (std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * M_PI * u2));
    } else if (init.kind == Init::uniform) {
      x = init.a * (2 * r.uniform() - 1);
    } else {
      x = init.kind == Init::ones ? 1 : init.kind == Init::constant ? init.a : 0;
    }
  }
  return v;
}

// Large enough that the fill is split across threads.
constexpr int64_t kN = 100003;

void build(Graph& g) {
  Tensor w = g.parameter("layer.w", {kN}, Init{Init::normal, 0.02});
  Tensor u = g.parameter("layer.u", {kN}, Init{Init::uniform, 0.5});
  Tensor o = g.parameter("layer.o", {7}, Init{Init::ones});
  Tensor st = g.state("layer.m", {kN}, Init{Init::constant, 0.25});
  Tensor x = g.input("x", {kN});
  g.output("y", sum(x * w + u + st) + sum(o));
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(SessionInit, MatchesTheSerialStreamBitForBitAtAnyThreadCount) {
  const uint64_t seed = 7;
  const struct {
    const char* name;
    Init init;
    size_t n;
  } bufs[] = {{"layer.w", {Init::normal, 0.02}, kN},
              {"layer.u", {Init::uniform, 0.5}, kN},
              {"layer.o", {Init::ones}, 7},
              {"layer.m", {Init::constant, 0.25}, kN}};
  for (int threads : {1, 2, 3}) {
    Graph g;
    build(g);
    Session s(SessionOptions{.device = Device::cpu, .seed = seed, .threads = threads});
    s.add(g);
    for (const auto& b : bufs) {
      const std::vector<double> want = expected(b.name, seed, b.init, b.n);
      const std::vector<float> got = s.get(b.name);
      ASSERT_EQ(got.size(), want.size());
      size_t bad = 0;
      for (size_t i = 0; i < want.size(); ++i) bad += !same_bits(got[i], float(want[i]));
      EXPECT_EQ(bad, 0u) << b.name << " with " << threads << " threads";
    }
  }
}

TEST(SessionInit, OracleKeepsTheDoubles) {
  Graph g;
  build(g);
  Session s(SessionOptions{.device = Device::cpu, .f64_oracle = true, .seed = 11, .threads = 2});
  s.add(g);
  const std::vector<double> want = expected("layer.w", 11, Init{Init::normal, 0.02}, kN);
  const std::vector<double> got = s.get_f64("layer.w");
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += std::memcmp(&got[i], &want[i], sizeof(double)) != 0;
  EXPECT_EQ(bad, 0u);
}

TEST(SessionInit, AWriteBeforeTheFirstRunIsKept) {
  Graph g;
  build(g);
  Session s(SessionOptions{.device = Device::cpu, .seed = 3});
  s.add(g);
  std::vector<float> w(kN, 0.5f), x(kN, 1.0f);
  s.set("layer.w", std::span<const float>(w));
  s.set("x", std::span<const float>(x));
  s.run();
  // The run draws the others, not the one written.
  EXPECT_EQ(s.get("layer.w"), w);
  const std::vector<double> u = expected("layer.u", 3, Init{Init::uniform, 0.5}, kN);
  EXPECT_TRUE(same_bits(s.get("layer.u")[kN - 1], float(u[kN - 1])));
  // y = sum(x*w + u + m) + sum(o) with w = 0.5 written, summed in f64 here. Tolerance 1e-4
  // relative: an f32 sum of 1e5 terms in [0.25, 1.25] drifts by about sqrt(n)*eps ~ 2e-5
  // relative; with the drawn w (sum ~ +-6) instead of the written one, y would be 5e4 lower.
  double want = 0;
  for (int64_t i = 0; i < kN; ++i) want += 0.5 + u[size_t(i)] + 0.25;
  want += 7;
  EXPECT_NEAR(s.scalar("y"), want, 1e-4 * want);
}

}  // namespace
}  // namespace meganeura
