// Corrupt, truncated and hostile files get a clear io::Error, never a crash or a huge allocation.
#include <random>
#include <tuple>

#include "allocation_counter.h"
#include "io_test_util.h"

namespace meganeura::io::testing {
namespace {

class Corrupt : public ScratchDir {
 protected:
  // Writes the raw bytes and returns the reader's error message.
  std::string load_error(const std::string& bytes) {
    const fs::path path = dir_ / "bad.safetensors";
    write_raw(path, bytes);
    std::string header_error = error_of([&] { read_safetensors_header(path); });
    std::string full_error = error_of([&] { read_safetensors(path); });
    EXPECT_EQ(header_error, full_error) << "header-only and full reads must agree";
    EXPECT_NE(full_error, "") << "accepted a corrupt file";
    EXPECT_EQ(full_error.find("[safetensors] '" + path.string() + "': "), 0u) << full_error;
    EXPECT_EQ(full_error.find('\n'), std::string::npos) << "message must be one line";
    return full_error;
  }
};

#define EXPECT_LOAD_ERROR(bytes, text) EXPECT_THAT_CONTAINS(load_error(bytes), text)
#define EXPECT_THAT_CONTAINS(message, text)                           \
  do {                                                                \
    std::string m_ = (message);                                       \
    EXPECT_NE(m_.find(text), std::string::npos) << "message: " << m_; \
  } while (0)

const std::string kF32Pair = R"("dtype":"F32","shape":[2])";

TEST_F(Corrupt, TooShortForTheLength) {
  EXPECT_LOAD_ERROR("", "file has 0 bytes, too short");
  EXPECT_LOAD_ERROR(std::string("\x05\x00\x00", 3), "file has 3 bytes, too short");
}

TEST_F(Corrupt, HeaderLengthBeyondTheFile) {
  EXPECT_LOAD_ERROR(raw_file("{}", "", 500), "header length 500 exceeds the file size 10");
  EXPECT_LOAD_ERROR(raw_file("{}", "", 1ull << 62), "exceeds the limit of 104857600 bytes");
}

TEST_F(Corrupt, HeaderNotJson) {
  EXPECT_LOAD_ERROR(raw_file(R"({"a": )"), "header is not valid JSON: parse error");
  EXPECT_LOAD_ERROR(raw_file("[1, 2]"), "header does not start with '{'");
  EXPECT_LOAD_ERROR(raw_file("{} x"), "header is not valid JSON");
  EXPECT_LOAD_ERROR(raw_file("{\"\xff\": 1}"), "header is not valid JSON");
  EXPECT_LOAD_ERROR(raw_file("{\"a\": 1, \"b\": 2"), "header is not valid JSON");
}

TEST_F(Corrupt, BadEntries) {
  EXPECT_LOAD_ERROR(raw_file(R"({"w": 3})"), "tensor 'w': entry is not a JSON object");
  EXPECT_LOAD_ERROR(raw_file(R"({"w": {"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, 'x')),
                    "tensor 'w': unsupported dtype 'I64' (supported: F32, F16, BF16, I32, U32, F64)");
  // A name with a newline must not break the one-line message.
  EXPECT_LOAD_ERROR(raw_file(R"({"a\nb": {"dtype":"I64","shape":[],"data_offsets":[0,8]}})", std::string(8, 'x')),
                    "tensor 'a\\x0ab': unsupported dtype");
  EXPECT_LOAD_ERROR(raw_file(R"({"w": {"dtype":7,"shape":[1],"data_offsets":[0,4]}})"), "dtype is not a string");
  EXPECT_LOAD_ERROR(raw_file(R"({"w": {"dtype":"F32","shape":[2,-3],"data_offsets":[0,4]}})"),
                    "tensor 'w': negative dimension -3 in shape [2,-3]");
  EXPECT_LOAD_ERROR(raw_file(R"({"w": {"dtype":"F32","shape":[2.5],"data_offsets":[0,4]}})"),
                    "dimension 2.5 is not a valid size");
  EXPECT_LOAD_ERROR(raw_file(R"({"w": {"dtype":"F32","shape":"2","data_offsets":[0,4]}})"), "shape is not an array");
  EXPECT_LOAD_ERROR(raw_file(R"({"w": {"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,4]}})"),
                    "is impossibly large");
  EXPECT_LOAD_ERROR(raw_file(R"({"w": {"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,4]}})"),
                    "is not a valid size");
  EXPECT_LOAD_ERROR(raw_file(R"({"w": {"dtype":"F32","shape":[2]}})"), "tensor 'w': missing field 'data_offsets'");
  EXPECT_LOAD_ERROR(raw_file("{\"w\": {" + kF32Pair + R"(,"data_offsets":[0,8],"extra":1}})", std::string(8, 'x')),
                    "tensor 'w': unexpected field 'extra'");
  EXPECT_LOAD_ERROR(raw_file("{\"w\": {" + kF32Pair + R"(,"data_offsets":[0]}})"), "data_offsets must be [begin, end]");
  EXPECT_LOAD_ERROR(raw_file("{\"w\": {" + kF32Pair + R"(,"data_offsets":[-1,7]}})"), "must be non-negative integers");
}

// A file of F32 [2] tensors with the given data_offsets and `data_bytes` bytes of data.
std::string f32_pairs(const std::vector<std::tuple<std::string, int, int>>& tensors, size_t data_bytes) {
  std::string header = "{";
  for (const auto& [name, begin, end] : tensors) {
    header += (header.size() > 1 ? ", \"" : "\"") + name + "\": {" + kF32Pair + ",\"data_offsets\":[" +
              std::to_string(begin) + "," + std::to_string(end) + "]}";
  }
  return raw_file(header + "}", std::string(data_bytes, 'x'));
}

TEST_F(Corrupt, OffsetsInconsistentWithShape) {
  EXPECT_LOAD_ERROR(f32_pairs({{"w", 0, 12}}, 12), "tensor 'w': data_offsets [0,12] do not match F32 [2] (8 bytes)");
  EXPECT_LOAD_ERROR(f32_pairs({{"w", 8, 0}}, 8), "data_offsets [8,0] do not match");
}

TEST_F(Corrupt, OffsetsOutOfBoundsOverlappingOrWithHoles) {
  EXPECT_LOAD_ERROR(f32_pairs({{"w", 0, 8}}, 4),
                    "tensor 'w' ends at data byte 8 but the data section has 4 bytes "
                    "(truncated file?)");
  EXPECT_LOAD_ERROR(f32_pairs({{"a", 0, 8}, {"b", 4, 12}}, 12), "tensors 'a' and 'b' overlap");
  EXPECT_LOAD_ERROR(f32_pairs({{"a", 0, 8}, {"b", 12, 20}}, 20), "hole of 4 bytes before tensor 'b'");
  EXPECT_LOAD_ERROR(f32_pairs({{"a", 4, 12}}, 12), "hole of 4 bytes before tensor 'a'");
  EXPECT_LOAD_ERROR(f32_pairs({{"w", 0, 8}}, 9), "1 bytes of trailing data after the last tensor");
  EXPECT_LOAD_ERROR(raw_file("{}", "junk"), "4 bytes of trailing data");
  EXPECT_EQ(error_of([&] {
              write_raw(dir_ / "ok.safetensors", f32_pairs({{"b", 8, 16}, {"a", 0, 8}}, 16));
              read_safetensors(dir_ / "ok.safetensors");
            }),
            "")
      << "the helper itself must build a valid file";
}

TEST_F(Corrupt, DuplicateKeys) {
  EXPECT_LOAD_ERROR(f32_pairs({{"w", 0, 8}, {"w", 0, 8}}, 8), "duplicate key 'w' in header");
  EXPECT_LOAD_ERROR(raw_file("{\"w\": {" + kF32Pair + R"(,"shape":[2],"data_offsets":[0,8]}})", std::string(8, 'x')),
                    "duplicate key 'shape' in header");
}

TEST_F(Corrupt, BadMetadata) {
  EXPECT_LOAD_ERROR(raw_file(R"({"__metadata__": [1]})"), "__metadata__ is not a JSON object");
  EXPECT_LOAD_ERROR(raw_file(R"({"__metadata__": {"step": 3}})"), "__metadata__ value of 'step' is not a string");
}

TEST_F(Corrupt, NotAFile) {
  std::string missing = error_of([&] { read_safetensors(dir_ / "nope.safetensors"); });
  EXPECT_THAT_CONTAINS(missing, "[safetensors] cannot read '" + (dir_ / "nope.safetensors").string() +
                                    "': open: No such file or directory");
  EXPECT_THAT_CONTAINS(error_of([&] { read_safetensors(dir_); }), "not a regular file");
}

// Sizes claimed by the file must be checked against it before anything is allocated.
TEST_F(Corrupt, AbsurdSizesDoNotAllocate) {
  const fs::path path = dir_ / "huge.safetensors";
  const std::string cases[] = {
      raw_file("{}", "", 1ull << 62),
      raw_file("{}", "", (100ull << 20) - 1),
      raw_file(R"({"w": {"dtype":"F64","shape":[1099511627776],"data_offsets":[0,8796093022208]}})"),
      raw_file(R"({"w": {"dtype":"F64","shape":[1024,1024,1024],"data_offsets":[0,8589934592]}})", "x"),
  };
  for (const std::string& bytes : cases) {
    write_raw(path, bytes);
    reset_largest_allocation();
    std::string message = error_of([&] { read_safetensors(path); });
    size_t largest = largest_allocation();
    EXPECT_NE(message, "");
    EXPECT_LT(largest, 64u << 10) << "allocated " << largest << " bytes for: " << message;
  }
}

// Random damage to a valid file must load or fail cleanly; the loop runs under the
// sanitizers in a sanitizer build.
TEST_F(Corrupt, RandomDamageLoadsOrFailsCleanly) {
  std::vector<float> a(37, 1.5f);
  std::vector<uint16_t> b(10, 0x3c00);
  std::vector<int64_t> sa = {37}, sb = {2, 5}, s0 = {};
  std::vector<int32_t> c = {42};
  const fs::path good = dir_ / "good.safetensors";
  write_safetensors(good,
                    {{"layer.weight", {DType::f32, sa, std::as_bytes(std::span(a))}},
                     {"layer.bias", {DType::f16, sb, std::as_bytes(std::span(b))}},
                     {"step", {DType::i32, s0, std::as_bytes(std::span(c))}}},
                    {{"format", "meganeura-checkpoint"}});
  const std::string original = read_raw(good);
  const fs::path path = dir_ / "damaged.safetensors";
  std::mt19937 rng(7);
  int loaded = 0, rejected = 0;
  for (int i = 0; i < 400; ++i) {
    std::string bytes = original;
    if (i % 4 == 0) {
      bytes.resize(rng() % bytes.size());
    } else {
      int flips = 1 + static_cast<int>(rng() % 4);
      // Mostly hit the length and header, where damage changes the parse.
      size_t span = (i % 3 == 0) ? bytes.size() : std::min<size_t>(bytes.size(), 8 + 180);
      for (int f = 0; f < flips; ++f) bytes[rng() % span] ^= static_cast<char>(1 + rng() % 255);
    }
    write_raw(path, bytes);
    try {
      read_safetensors(path);
      ++loaded;
    } catch (const Error& e) {
      ++rejected;
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "variant " << i << " threw a foreign exception: " << e.what();
    }
  }
  EXPECT_EQ(loaded + rejected, 400);
  EXPECT_GT(rejected, 200) << "most damage must be detected";
}

}  // namespace
}  // namespace meganeura::io::testing
