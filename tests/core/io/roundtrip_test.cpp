// Writing then reading gives back every byte, and the file follows the published layout.
#include <nlohmann/json.hpp>
#include <random>

#include "allocation_counter.h"
#include "io_test_util.h"

namespace meganeura::io::testing {
namespace {

using nlohmann::json;

constexpr DType kAllDTypes[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u32, DType::f64};

// Random bytes cover every bit pattern: NaN payloads, denormals, negative zero.
TensorRecord random_record(DType dtype, std::vector<int64_t> shape, std::mt19937& rng) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  std::vector<std::byte> data(static_cast<size_t>(numel) * dtype_size(dtype));
  for (auto& b : data) b = static_cast<std::byte>(rng());
  return TensorRecord{dtype, std::move(shape), std::move(data)};
}

const std::vector<std::vector<int64_t>> kShapes = {{}, {0}, {3, 0, 2}, {1}, {7}, {2, 3, 5}, {1, 1, 1, 4}};

class RoundTrip : public ScratchDir {};

TEST_F(RoundTrip, EveryDTypeAndShapeIsBitExact) {
  std::mt19937 rng(1234);
  std::map<std::string, TensorRecord> original;
  for (DType dtype : kAllDTypes) {
    for (size_t s = 0; s < kShapes.size(); ++s) {
      original.emplace(std::string(dtype_name(dtype)) + ".shape" + std::to_string(s),
                       random_record(dtype, kShapes[s], rng));
    }
  }
  std::map<std::string, std::string> metadata = {{"note", "any text, ünïcödé, \"quotes\" and \\ backslashes"},
                                                 {"empty", ""}};
  NamedTensorViews views;
  for (const auto& [name, record] : original) views.emplace_back(name, record.view());
  const fs::path path = dir_ / "all.safetensors";
  write_safetensors(path, views, metadata);

  SafetensorsFile loaded = read_safetensors(path);
  EXPECT_EQ(loaded.source, path);
  EXPECT_EQ(loaded.metadata, metadata);
  ASSERT_EQ(loaded.tensors.size(), original.size());
  for (const auto& [name, record] : original) {
    auto it = loaded.tensors.find(name);
    ASSERT_NE(it, loaded.tensors.end()) << name;
    EXPECT_EQ(it->second.dtype, record.dtype) << name;
    EXPECT_EQ(it->second.shape, record.shape) << name;
    EXPECT_TRUE(it->second.data == record.data) << name;
  }

  SafetensorsHeader header = read_safetensors_header(path);
  EXPECT_EQ(header.metadata, metadata);
  ASSERT_EQ(header.tensors.size(), original.size());
  EXPECT_EQ(header.tensors.at("f16.shape5").dtype, DType::f16);
  EXPECT_EQ(header.tensors.at("f16.shape5").shape, (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(header.tensors.at("f16.shape5").end - header.tensors.at("f16.shape5").begin, 60u);
}

// Checks the bytes on disk against the published format with an independent parse.
TEST_F(RoundTrip, FileLayoutFollowsTheFormat) {
  std::vector<float> a = {1.0f, -2.5f, 3.25f};
  std::vector<int32_t> b = {7, -8};
  std::vector<int64_t> shape_a = {3}, shape_b = {1, 2};
  const fs::path path = dir_ / "layout.safetensors";
  write_safetensors(path,
                    {{"zeta", {DType::f32, shape_a, std::as_bytes(std::span(a))}},
                     {"alpha", {DType::i32, shape_b, std::as_bytes(std::span(b))}}},
                    {{"k", "v"}});
  std::string bytes = read_raw(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u) << "data section must start 8-byte aligned";
  ASSERT_EQ(bytes.size(), 8 + n + 12 + 8);
  json header = json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["__metadata__"], json({{"k", "v"}}));
  // Name order: alpha first.
  EXPECT_EQ(header["alpha"], json::parse(R"({"dtype":"I32","shape":[1,2],"data_offsets":[0,8]})"));
  EXPECT_EQ(header["zeta"], json::parse(R"({"dtype":"F32","shape":[3],"data_offsets":[8,20]})"));
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, b.data(), 8), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n + 8, a.data(), 12), 0);
}

TEST_F(RoundTrip, NoTensorsAtAll) {
  const fs::path path = dir_ / "empty.safetensors";
  write_safetensors(path, {}, {});
  std::string bytes = read_raw(path);
  EXPECT_EQ(bytes.size(), 16u);  // length + "{}" padded to 8 bytes
  SafetensorsFile loaded = read_safetensors(path);
  EXPECT_TRUE(loaded.tensors.empty());
  EXPECT_TRUE(loaded.metadata.empty());
}

TEST_F(RoundTrip, OverwritesAnExistingFile) {
  std::vector<float> one = {1.0f}, two = {2.0f, 3.0f};
  std::vector<int64_t> s1 = {1}, s2 = {2};
  const fs::path path = dir_ / "x.safetensors";
  write_safetensors(path, {{"w", {DType::f32, s1, std::as_bytes(std::span(one))}}});
  write_safetensors(path, {{"w", {DType::f32, s2, std::as_bytes(std::span(two))}}});
  EXPECT_EQ(read_safetensors(path).tensors.at("w").shape, s2);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

// The reader reads straight into the records: no buffer as large as the file, and the
// largest allocation is the largest tensor.
TEST_F(RoundTrip, LargeFileReadsIntoTheRecordsDirectly) {
  std::mt19937 rng(99);
  std::map<std::string, TensorRecord> original;
  for (int i = 0; i < 6; ++i) {
    original.emplace("block" + std::to_string(i), random_record(DType::f32, {1024, 1024 + 16 * i}, rng));
  }
  NamedTensorViews views;
  for (const auto& [name, record] : original) views.emplace_back(name, record.view());
  const fs::path path = dir_ / "large.safetensors";
  write_safetensors(path, views);
  ASSERT_GT(fs::file_size(path), 24u << 20);
  reset_largest_allocation();
  SafetensorsFile loaded = read_safetensors(path);
  EXPECT_EQ(largest_allocation(), original.at("block5").data.size());
  for (const auto& [name, record] : original) EXPECT_TRUE(loaded.tensors.at(name).data == record.data) << name;
}

// More tensors than one writev call takes (IOV_MAX is 1024 on Linux).
TEST_F(RoundTrip, ThousandsOfSmallTensors) {
  std::mt19937 rng(5);
  std::map<std::string, TensorRecord> original;
  for (int i = 0; i < 3000; ++i) {
    original.emplace("t" + std::to_string(i), random_record(DType::bf16, {1 + i % 5}, rng));
  }
  NamedTensorViews views;
  for (const auto& [name, record] : original) views.emplace_back(name, record.view());
  const fs::path path = dir_ / "many.safetensors";
  write_safetensors(path, views);
  SafetensorsFile loaded = read_safetensors(path);
  ASSERT_EQ(loaded.tensors.size(), original.size());
  for (const auto& [name, record] : original) {
    ASSERT_TRUE(loaded.tensors.at(name).data == record.data) << name;
  }
}

TEST_F(RoundTrip, RelativePathInTheWorkingDirectory) {
  const fs::path previous = fs::current_path();
  fs::current_path(dir_);
  std::vector<double> v = {0.25};
  std::vector<int64_t> shape = {1};
  std::string error = error_of([&] {
    write_safetensors("rel.safetensors", {{"x", {DType::f64, shape, std::as_bytes(std::span(v))}}});
  });
  fs::current_path(previous);
  EXPECT_EQ(error, "");
  EXPECT_EQ(read_safetensors(dir_ / "rel.safetensors").tensors.at("x").dtype, DType::f64);
}

TEST_F(RoundTrip, WriterRejectsInconsistentInput) {
  std::vector<float> v = {1, 2, 3, 4};
  auto data = std::as_bytes(std::span(v));
  std::vector<int64_t> ok = {4}, wrong = {5}, negative = {-4};
  const fs::path path = dir_ / "bad.safetensors";
  auto attempt = [&](NamedTensorViews views, std::map<std::string, std::string> meta = {}) {
    return error_of([&] { write_safetensors(path, views, meta); });
  };
  EXPECT_NE(attempt({{"w", {DType::f32, ok, data}}, {"w", {DType::f32, ok, data}}}).find("duplicate tensor name 'w'"),
            std::string::npos);
  EXPECT_NE(attempt({{"w", {DType::f32, wrong, data}}}).find("16 bytes given, F32 [5] needs 20"), std::string::npos);
  EXPECT_NE(attempt({{"w", {DType::f32, negative, data}}}).find("invalid shape [-4]"), std::string::npos);
  EXPECT_NE(attempt({{"__metadata__", {DType::f32, ok, data}}}).find("invalid tensor name"), std::string::npos);
  EXPECT_NE(attempt({{"", {DType::f32, ok, data}}}).find("invalid tensor name"), std::string::npos);
  EXPECT_NE(attempt({{"bad\xff", {DType::f32, ok, data}}}).find("not valid UTF-8"), std::string::npos);
  EXPECT_NE(attempt({}, {{"k", "\xc3"}}).find("not valid UTF-8"), std::string::npos);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir_)) << "no temporary file may be left behind";
}

}  // namespace
}  // namespace meganeura::io::testing
