// GGUF files and block formats (meganeura/gguf.h): files written by an independent writer
// (tests/core/gguf_reference.py, from the published layout with Python's struct) read back
// with every metadata type and decoded tensors; files we write read by that script; write ->
// read round trips; malformed files refused naming the problem (every truncation of a valid
// file among them); the block formats' round trips within their stated bounds; f16 rounding
// against IEEE's bit patterns.
#include "meganeura/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace meganeura::io {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("meganeura-gguf-" + std::to_string(::getpid()) + "-" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

const std::string kReference = std::string(MEGANEURA_SOURCE_DIR) + "/tests/core/gguf_reference.py";

bool have_python() { return std::system("/usr/bin/python3 -c '' 2>/dev/null") == 0; }

std::string shell_quoted(const fs::path& p) { return "'" + p.string() + "'"; }

std::vector<float> decoded(const GgufMap& map, const GgufTensorInfo& t) {
  std::vector<float> out(size_t(t.numel()));
  dequantize(t.type, map.data(t.name), out);
  return out;
}

// Values decoded by the script (products of f16 scales and small integers, in double) against
// ours (the same products in f32, a few roundings): within 1e-6 relative to the magnitude.
void expect_values(const std::vector<float>& got, const nlohmann::json& want, const std::string& name) {
  ASSERT_EQ(got.size(), want.size()) << name;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want[i].get<double>();
    ASSERT_NEAR(got[i], w, 1e-6 * std::max(1.0, std::abs(w))) << name << "[" << i << "]";
  }
}

TEST(Gguf, ReadsWhatTheReferenceWrote) {
  ASSERT_TRUE(have_python()) << "/usr/bin/python3 (a test package, scripts/setup.sh) is needed";
  TempDir dir;
  const fs::path file = dir.path / "ref.gguf", expected = dir.path / "expected.json";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + shell_quoted(kReference) + " write " + shell_quoted(file) + " " +
                         shell_quoted(expected))
                            .c_str()),
            0);
  const GgufMap map(file);
  const GgufFile& f = map.file();
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.alignment, 64u);
  EXPECT_EQ(*f.find("general.architecture")->string(), "llama");
  EXPECT_EQ(*f.find("general.name")->string(), "tëst ✓");
  EXPECT_EQ(std::get<uint8_t>(f.find("u8")->v), 250);
  EXPECT_EQ(std::get<int8_t>(f.find("i8")->v), -100);
  EXPECT_EQ(std::get<uint16_t>(f.find("u16")->v), 65000);
  EXPECT_EQ(std::get<int16_t>(f.find("i16")->v), -32000);
  EXPECT_EQ(std::get<uint32_t>(f.find("u32")->v), 4000000000u);
  EXPECT_EQ(std::get<int32_t>(f.find("i32")->v), -2000000000);
  EXPECT_EQ(std::get<float>(f.find("f32")->v), 0.375f);
  EXPECT_EQ(std::get<bool>(f.find("yes")->v), true);
  EXPECT_EQ(std::get<bool>(f.find("no")->v), false);
  EXPECT_EQ(std::get<uint64_t>(f.find("u64")->v), (uint64_t(1) << 63) + 5);
  EXPECT_FALSE(f.find("u64")->integer());  // above int64's range
  EXPECT_EQ(f.find("i64")->integer(), -(int64_t(1) << 62));
  EXPECT_EQ(f.find("f64")->number(), -1.0e-300);
  EXPECT_EQ(*f.find("empty")->string(), "");
  const GgufArray& tokens = *f.find("tokens")->array();
  ASSERT_EQ(tokens.element, GgufType::string);
  ASSERT_EQ(tokens.items.size(), 4u);
  EXPECT_EQ(*tokens.items[2].string(), "ĠThe");
  EXPECT_EQ(std::get<float>(f.find("scores")->array()->items[1].v), -1.25f);
  const GgufArray& nested = *f.find("nested")->array();
  ASSERT_EQ(nested.items.size(), 2u);
  EXPECT_EQ(nested.items[0].array()->items[1].integer(), 2);
  EXPECT_TRUE(nested.items[1].array()->items.empty());
  EXPECT_EQ(f.find("missing"), nullptr);

  std::ifstream in(expected);
  const nlohmann::json want = nlohmann::json::parse(in);
  ASSERT_EQ(f.tensors.size(), want.size());
  for (const GgufTensorInfo& t : f.tensors) {
    const nlohmann::json& w = want.at(t.name);
    EXPECT_EQ(t.shape, w["shape"].get<std::vector<int64_t>>()) << t.name;
    EXPECT_EQ(std::string(ggml_block(t.type)->name), w["type"].get<std::string>()) << t.name;
    EXPECT_EQ(t.offset % 64, 0u) << t.name;
    expect_values(decoded(map, t), w["values"], t.name);
  }
  // Python's struct rounds to f16 to nearest even, as quantize() must.
  const std::vector<float> floats = decoded(map, *f.tensor("t.f32"));
  const std::vector<std::byte> f16 = quantize(GgmlType::f16, floats);
  const std::span<const std::byte> theirs = map.data("t.f16");
  EXPECT_TRUE(std::equal(f16.begin(), f16.end(), theirs.begin(), theirs.end()));
  EXPECT_THROW(map.data("nope"), Error);
}

std::vector<float> normal(size_t n, uint32_t seed, float scale = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A file of every metadata type and every element type, quantised from random values.
struct Example {
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::vector<std::vector<std::byte>> data;
  std::vector<GgufTensorView> tensors;
  Example() {
    metadata = {{"general.architecture", {std::string("llama")}},
                {"llama.block_count", {uint32_t(30)}},
                {"llama.rope.freq_base", {100000.0f}},
                {"b", {true}},
                {"i8", {int8_t(-3)}},
                {"u16", {uint16_t(7)}},
                {"i16", {int16_t(-7)}},
                {"u8", {uint8_t(200)}},
                {"i32", {int32_t(-9)}},
                {"u64", {uint64_t(1) << 40}},
                {"i64", {int64_t(-5)}},
                {"f64", {0.1}},
                {"tokenizer.ggml.tokens", {GgufArray{GgufType::string, {{std::string("a")}, {std::string("bc")}}}}},
                {"nested", {GgufArray{GgufType::array, {{GgufArray{GgufType::u8, {{uint8_t(1)}}}}}}}}};
    const std::vector<std::tuple<std::string, GgmlType, std::vector<int64_t>>> specs = {
        {"a.f32", GgmlType::f32, {3, 5}},    {"b.f16", GgmlType::f16, {7}},       {"c.bf16", GgmlType::bf16, {2, 2}},
        {"d.q8_0", GgmlType::q8_0, {3, 64}}, {"e.q4_0", GgmlType::q4_0, {2, 32}}, {"f.q4_k", GgmlType::q4_k, {2, 512}}};
    uint32_t seed = 1;
    for (const auto& [name, type, shape] : specs) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      data.push_back(quantize(type, normal(size_t(n), seed++)));
      tensors.push_back({name, uint32_t(type), shape, {}});
    }
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = data[i];
  }
};

TEST(Gguf, WriteThenReadGivesTheSameFile) {
  TempDir dir;
  const Example e;
  write_gguf(dir.path / "a.gguf", e.metadata, e.tensors);
  const GgufMap map(dir.path / "a.gguf");
  ASSERT_EQ(map.file().metadata.size(), e.metadata.size());
  for (size_t i = 0; i < e.metadata.size(); ++i) {
    EXPECT_EQ(map.file().metadata[i].first, e.metadata[i].first);
    EXPECT_TRUE(map.file().metadata[i].second.v == e.metadata[i].second.v) << e.metadata[i].first;
  }
  ASSERT_EQ(map.file().tensors.size(), e.tensors.size());
  for (size_t i = 0; i < e.tensors.size(); ++i) {
    const GgufTensorInfo& t = map.file().tensors[i];
    EXPECT_EQ(t.name, e.tensors[i].name);
    EXPECT_EQ(t.shape, e.tensors[i].shape);
    EXPECT_EQ(t.type, e.tensors[i].type);
    EXPECT_EQ(t.offset % 32, 0u);
    const std::span<const std::byte> got = map.data(t.name);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), e.data[i].begin(), e.data[i].end())) << t.name;
  }
  // An alignment other than 32 must be declared, and then is used.
  EXPECT_THROW(write_gguf(dir.path / "b.gguf", e.metadata, e.tensors, 64), Error);
  auto metadata = e.metadata;
  metadata.emplace_back("general.alignment", GgufValue{uint32_t(64)});
  write_gguf(dir.path / "b.gguf", metadata, e.tensors, 64);
  for (const GgufTensorInfo& t : read_gguf(dir.path / "b.gguf").tensors) EXPECT_EQ(t.offset % 64, 0u) << t.name;
}

TEST(Gguf, TheReferenceReadsWhatWeWrite) {
  ASSERT_TRUE(have_python()) << "/usr/bin/python3 (a test package, scripts/setup.sh) is needed";
  TempDir dir;
  const Example e;
  write_gguf(dir.path / "ours.gguf", e.metadata, e.tensors);
  const fs::path out = dir.path / "read.json";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + shell_quoted(kReference) + " check " +
                         shell_quoted(dir.path / "ours.gguf") + " > " + shell_quoted(out))
                            .c_str()),
            0);
  std::ifstream in(out);
  const nlohmann::json theirs = nlohmann::json::parse(in);
  EXPECT_EQ(theirs["version"], 3);
  EXPECT_EQ(theirs["metadata"]["general.architecture"], "llama");
  EXPECT_EQ(theirs["metadata"]["llama.block_count"], 30);
  EXPECT_EQ(theirs["metadata"]["llama.rope.freq_base"], 100000.0);
  EXPECT_EQ(theirs["metadata"]["b"], true);
  EXPECT_EQ(theirs["metadata"]["i8"], -3);
  EXPECT_EQ(theirs["metadata"]["u64"], uint64_t(1) << 40);
  EXPECT_EQ(theirs["metadata"]["f64"], 0.1);
  EXPECT_EQ(theirs["metadata"]["tokenizer.ggml.tokens"], nlohmann::json({"a", "bc"}));
  EXPECT_EQ(theirs["metadata"]["nested"], nlohmann::json::parse("[[1]]"));
  const GgufMap map(dir.path / "ours.gguf");
  for (const GgufTensorInfo& t : map.file().tensors) {
    const nlohmann::json& w = theirs["tensors"].at(t.name);
    EXPECT_EQ(w["shape"].get<std::vector<int64_t>>(), t.shape) << t.name;
    EXPECT_EQ(w["offset"].get<uint64_t>(), t.offset) << t.name;
    expect_values(decoded(map, t), w["values"], t.name);
  }
}

std::vector<char> bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void put_bytes(const fs::path& p, const std::vector<char>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(b.data(), std::streamsize(b.size()));
}
std::string refusal(const fs::path& p) {
  try {
    (void)read_gguf(p);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Offsets in a file with one f32 tensor "w" [2] and one u32 key "k" (see the layout in gguf.h).
constexpr size_t kCountsAt = 8, kKeyAt = 24, kKeyTypeAt = 24 + 8 + 1, kNameAt = kKeyTypeAt + 4 + 4;
constexpr size_t kRankAt = kNameAt + 8 + 1, kDimAt = kRankAt + 4, kTypeAt = kDimAt + 8, kOffsetAt = kTypeAt + 4;

TEST(Gguf, MalformedFilesAreRefusedNamingTheProblem) {
  TempDir dir;
  const std::vector<float> w = {1.5f, -2};
  const std::vector<std::byte> data = quantize(GgmlType::f32, w);
  write_gguf(dir.path / "good.gguf", {{"k", {uint32_t(7)}}}, {{"w", uint32_t(GgmlType::f32), {2}, data}});
  const std::vector<char> good = bytes_of(dir.path / "good.gguf");
  ASSERT_EQ(good.size(), 96u + 8u);  // 74 header bytes padded to 96, then the data
  ASSERT_EQ(read_gguf(dir.path / "good.gguf").tensors.at(0).name, "w");
  ASSERT_EQ(good[kNameAt + 8], 'w');
  const fs::path bad = dir.path / "bad.gguf";
  auto refused = [&](auto change, const std::string& needle) {
    std::vector<char> b = good;
    change(b);
    put_bytes(bad, b);
    const std::string message = refusal(bad);
    EXPECT_NE(message.find(needle), std::string::npos) << "wanted '" << needle << "', got: " << message;
    EXPECT_NE(message.find(bad.string()), std::string::npos) << message;
  };
  auto set = [](size_t at, auto v) {
    return [at, v](std::vector<char>& b) { std::memcpy(b.data() + at, &v, sizeof v); };
  };
  refused(set(0, uint32_t(0x46554746)), "no GGUF magic");
  refused(set(4, uint32_t(4)), "version 4");
  refused(set(kCountsAt, uint64_t(1) << 40), "tensors exceed the limit");
  refused(set(kCountsAt + 8, uint64_t(1) << 40), "metadata entries exceed the limit");
  refused(set(kKeyAt, uint64_t(1) << 30), "exceeds the limit");
  refused(set(kKeyAt, uint64_t(100)), "runs past the end");
  refused(set(kKeyTypeAt, uint32_t(13)), "value type 13");
  refused(set(kKeyTypeAt, uint32_t(GgufType::boolean)), "not 0 or 1");
  refused(
      [&](std::vector<char>& b) {
        set(kKeyTypeAt, uint32_t(GgufType::array))(b);
        set(kKeyTypeAt + 4, uint32_t(20))(b);  // the array's element type
      },
      "'k''s elements has value type 20");
  refused(set(kRankAt, uint32_t(5)), "5 dimensions");
  refused(set(kDimAt, uint64_t(1) << 63), "above 2^63");
  refused(set(kDimAt, uint64_t(3)), "runs past the end of the file");
  refused(set(kDimAt, uint64_t(1) << 62), "larger than 2^64 bytes");  // 2^62 elements of 4 bytes
  refused(set(kTypeAt, uint32_t(7)), "element type 7, which this reader does not decode");
  refused(set(kTypeAt, uint32_t(GgmlType::q8_0)), "not a multiple of its block of 32");
  refused(set(kOffsetAt, uint64_t(4)), "not a multiple of the alignment");
  refused(set(kOffsetAt, uint64_t(64)), "runs past the end of the file");
  // general.alignment of 0 or not a power of two
  auto renamed = [&](std::vector<char>& b) {
    const std::string key = "general.alignment";
    std::vector<char> out(b.begin(), b.begin() + long(kKeyAt));
    uint64_t n = key.size();
    out.insert(out.end(), reinterpret_cast<char*>(&n), reinterpret_cast<char*>(&n) + 8);
    out.insert(out.end(), key.begin(), key.end());
    out.insert(out.end(), b.begin() + long(kKeyTypeAt), b.end());
    b = out;
  };
  refused(
      [&](std::vector<char>& b) {
        renamed(b);
        const uint32_t three = 3;
        std::memcpy(b.data() + kKeyAt + 8 + 17 + 4, &three, 4);
      },
      "general.alignment must be a u32 power of two");
  // Two tensors at the same offset, and a name given twice.
  write_gguf(dir.path / "two.gguf", {}, {{"a", 0, {2}, data}, {"b", 0, {2}, data}});
  std::vector<char> two = bytes_of(dir.path / "two.gguf");
  const size_t second_offset = 24 + (8 + 1 + 4 + 8 + 4 + 8) + (8 + 1 + 4 + 8 + 4);
  uint64_t zero = 0;
  std::memcpy(two.data() + second_offset, &zero, 8);
  put_bytes(bad, two);
  EXPECT_NE(refusal(bad).find("tensors 'a' and 'b' overlap"), std::string::npos) << refusal(bad);
  two = bytes_of(dir.path / "two.gguf");
  two[second_offset - 17] = 'a';  // the second name becomes "a"
  put_bytes(bad, two);
  EXPECT_NE(refusal(bad).find("tensor 'a' appears twice"), std::string::npos) << refusal(bad);
  // Every truncation of a valid file is refused (none reads past its end).
  for (size_t n = 0; n + 1 < good.size(); ++n) {
    put_bytes(bad, std::vector<char>(good.begin(), good.begin() + long(n)));
    EXPECT_NE(refusal(bad), "no error") << "truncated to " << n << " bytes";
  }
  EXPECT_NE(refusal(dir.path / "missing.gguf").find("missing.gguf"), std::string::npos);
  // The writer refuses what it cannot write faithfully.
  EXPECT_THROW(write_gguf(bad, {}, {{"w", 0, {3}, data}}), Error);                       // 8 bytes for 3 f32
  EXPECT_THROW(write_gguf(bad, {}, {{"w", 0, {2}, data}, {"w", 0, {2}, data}}), Error);  // a name twice
  EXPECT_THROW(write_gguf(bad, {{"k", {1.0}}, {"k", {2.0}}}, {}), Error);                // a key twice
  EXPECT_THROW(write_gguf(bad, {}, {{"w", 99, {2}, data}}), Error);                      // an unknown type
}

// Per block, the largest error each format allows (see gguf.h for the formats):
// - Q8_0: step d = max|x| / 127 stored in f16: half a step, plus 127 steps' share of the
//   scale's f16 rounding (2^-11 relative): d (0.5 + 127 * 2^-11).
// - Q4_0: step |d| = max|x| / 8: half a step inside the grid, a whole step for values of the
//   other sign than the largest (the grid stops at 7 |d| there), plus 8 steps' share of the
//   scale's rounding: |d| (1 + 8 * 2^-11).
// - Q4_K: half a sub-block's step (at most 63 d), plus what rounding the sub-block's scale and
//   offset to their 6-bit grids (steps d and dmin of the super-block) can leave uncovered at
//   the range's ends: 15 d / 2 + dmin / 2, with 10% for the f16 rounding of d and dmin.
TEST(Gguf, BlockFormatsRoundTripWithinTheirBounds) {
  std::vector<float> x = normal(4096, 3);
  std::fill(x.begin(), x.begin() + 256, 0.0f);                    // an all-zero block and super-block
  x[300] = 40;                                                    // an outlier
  for (size_t i = 512; i < 768; ++i) x[i] = -std::abs(x[i]) - 1;  // all negative
  for (size_t i = 768; i < 1024; ++i) x[i] = std::abs(x[i]) + 2;  // all positive, away from 0
  for (GgmlType type : {GgmlType::q8_0, GgmlType::q4_0, GgmlType::q4_k}) {
    const std::vector<std::byte> q = quantize(type, x);
    std::vector<float> y(x.size());
    dequantize(uint32_t(type), q, y);
    const GgmlBlock b = *ggml_block(uint32_t(type));
    EXPECT_EQ(int64_t(q.size()), int64_t(x.size()) / b.block * b.block_bytes);
    double err2 = 0, norm2 = 0;
    for (size_t blk = 0; blk < x.size() / size_t(b.block); ++blk) {
      const float* xb = x.data() + blk * size_t(b.block);
      float amax = 0;
      for (int64_t i = 0; i < b.block; ++i) amax = std::max(amax, std::abs(xb[i]));
      for (int64_t i = 0; i < b.block; ++i) {
        const size_t at = blk * size_t(b.block) + size_t(i);
        double bound = 0;
        if (type == GgmlType::q8_0) {
          bound = amax / 127.0 * (0.5 + 127.0 / 2048);
        } else if (type == GgmlType::q4_0) {
          bound = amax / 8.0 * (1 + 8.0 / 2048);
        } else {
          const std::byte* s = q.data() + blk * size_t(b.block_bytes);
          auto half = [&](size_t o) {
            std::vector<float> v(1);
            dequantize(uint32_t(GgmlType::f16), std::span(s + o, 2), v);
            return double(v[0]);
          };
          const double d = half(0), dmin = half(2);  // a sub-block's step is at most 63 d
          bound = 0.5 * 63 * d + 1.1 * (7.5 * d + 0.5 * dmin);
        }
        ASSERT_LE(std::abs(double(y[at]) - x[at]), bound + 1e-30) << b.name << " at " << at;
        err2 += (double(y[at]) - x[at]) * (double(y[at]) - x[at]);
        norm2 += double(x[at]) * x[at];
      }
    }
    std::printf("%s: relative L2 error %.4f on normal data\n", std::string(b.name).c_str(), std::sqrt(err2 / norm2));
    EXPECT_LT(std::sqrt(err2 / norm2), type == GgmlType::q8_0 ? 0.01 : 0.15) << b.name;
  }
  std::vector<float> y(33);
  EXPECT_THROW(quantize(GgmlType::q8_0, y), std::invalid_argument);
  EXPECT_THROW(dequantize(uint32_t(GgmlType::q8_0), std::vector<std::byte>(34), std::span(y).first(32 + 1)),
               std::invalid_argument);
}

// IEEE binary16 rounding to nearest, ties to even: expected bit patterns from the standard.
TEST(Gguf, HalfPrecisionRoundsToNearestEven) {
  const std::vector<std::pair<float, uint16_t>> cases = {{1.0f, 0x3c00},
                                                         {-2.0f, 0xc000},
                                                         {65504.0f, 0x7bff},
                                                         {65519.0f, 0x7bff},
                                                         {65520.0f, 0x7c00},
                                                         {1e10f, 0x7c00},
                                                         {-0.0f, 0x8000},
                                                         {0x1p-24f, 0x0001},
                                                         {0x1p-25f, 0x0000},
                                                         {0x3p-25f, 0x0002},
                                                         {0x1p-14f, 0x0400},
                                                         {1.0f + 0x1p-11f, 0x3c00},
                                                         {1.0f + 0x3p-11f, 0x3c02},
                                                         {0x1.ffcp-15f, 0x0400},
                                                         {std::numeric_limits<float>::infinity(), 0x7c00}};
  for (const auto& [f, h] : cases) {
    const std::vector<std::byte> b = quantize(GgmlType::f16, std::vector<float>{f});
    uint16_t got;
    std::memcpy(&got, b.data(), 2);
    EXPECT_EQ(got, h) << f;
  }
  const std::vector<std::byte> nan = quantize(GgmlType::f16, std::vector<float>{NAN});
  std::vector<float> back(1);
  dequantize(uint32_t(GgmlType::f16), nan, back);
  EXPECT_TRUE(std::isnan(back[0]));
  dequantize(uint32_t(GgmlType::f16), std::vector<std::byte>{std::byte(1), std::byte(0)}, back);
  EXPECT_EQ(back[0], 0x1p-24f);
}

}  // namespace
}  // namespace meganeura::io
