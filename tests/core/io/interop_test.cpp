// Interoperability with an independent Python writer and reader (tests/core/io/interop.py).
#include <bit>
#include <cmath>
#include <cstdio>

#include "common/process.h"
#include "io_test_util.h"

namespace meganeura::io::testing {
namespace {

const std::string kScript = std::string(MEGANEURA_SOURCE_DIR) + "/tests/core/io/interop.py";
const char* kPython = "/usr/bin/python3";

// Runs a shell command and returns (exit status, combined output).
std::pair<int, std::string> run(const std::string& command) {
  auto r = meganeura::common::run({.argv = {"/bin/sh", "-c", command + " 2>&1"}}, "", 600);
  return {r.status, r.out + r.err};
}

// f32 -> f16 bits for the normal, exactly representable values used here.
uint16_t half_bits(float v) {
  uint32_t b = std::bit_cast<uint32_t>(v);
  uint32_t sign = (b >> 16) & 0x8000u;
  if ((b & 0x7fffffffu) == 0) return static_cast<uint16_t>(sign);
  uint32_t exponent = ((b >> 23) & 0xffu) - 127 + 15;
  return static_cast<uint16_t>(sign | (exponent << 10) | ((b >> 13) & 0x3ffu));
}

// The bytes of element i in the formula both sides share (see interop.py).
std::vector<std::byte> formula_bytes(DType dtype, int64_t i) {
  float small = static_cast<float>((i * 37) % 101 - 50) / 8.0f;
  uint32_t wrapped = static_cast<uint32_t>((static_cast<uint64_t>(i) * 2654435761ull) & 0xffffffffu);
  switch (dtype) {
    case DType::f32: return to_bytes(&small, 4);
    case DType::f16: {
      uint16_t h = half_bits(small);
      return to_bytes(&h, 2);
    }
    case DType::bf16: {
      auto h = static_cast<uint16_t>(std::bit_cast<uint32_t>(small) >> 16);
      return to_bytes(&h, 2);
    }
    case DType::f64: {
      double d = static_cast<double>(i) * 0.1 - 3.0;
      return to_bytes(&d, 8);
    }
    case DType::i32: {
      auto s = static_cast<int32_t>(wrapped);
      return to_bytes(&s, 4);
    }
    case DType::u32: return to_bytes(&wrapped, 4);
    case DType::q8_0:
    case DType::q4_0: break;  // block formats: not safetensors types
  }
  return {};
}

TensorRecord formula_record(DType dtype, std::vector<int64_t> shape) {
  TensorRecord r{dtype, std::move(shape), {}};
  for (int64_t i = 0; i < r.numel(); ++i) {
    auto b = formula_bytes(dtype, i);
    r.data.insert(r.data.end(), b.begin(), b.end());
  }
  return r;
}

class Interop : public ScratchDir {};

TEST_F(Interop, ReadsAFileWrittenByPython) {
  const fs::path path = dir_ / "from_python.safetensors";
  auto [status, output] = run(std::string(kPython) + " " + kScript + " write " + path.string());
  ASSERT_EQ(status, 0) << output;
  SafetensorsFile file = read_safetensors(path);
  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"writer", "python"}, {"step", "5"}}));
  const std::map<std::string, std::pair<DType, std::vector<int64_t>>> expected = {
      {"py.f32", {DType::f32, {3, 4}}}, {"py.f16", {DType::f16, {5}}},     {"py.bf16", {DType::bf16, {2, 3}}},
      {"py.i32", {DType::i32, {7}}},    {"py.u32", {DType::u32, {2, 2}}},  {"py.f64", {DType::f64, {3}}},
      {"py.scalar", {DType::f32, {}}},  {"py.empty", {DType::f32, {0, 3}}}};
  ASSERT_EQ(file.tensors.size(), expected.size());
  for (const auto& [name, want] : expected) {
    ASSERT_TRUE(file.tensors.count(name)) << name;
    const TensorRecord& got = file.tensors.at(name);
    EXPECT_EQ(got.dtype, want.first) << name;
    EXPECT_EQ(got.shape, want.second) << name;
    TensorRecord ref = formula_record(want.first, want.second);
    ASSERT_EQ(got.data.size(), ref.data.size()) << name;
    for (size_t b = 0; b < ref.data.size(); ++b) {
      ASSERT_EQ(got.data[b], ref.data[b]) << name << " byte " << b;
    }
  }
  // Spot values, written out by hand, pin the formula itself.
  float f;
  std::memcpy(&f, file.tensors.at("py.f32").data.data() + 4, 4);
  EXPECT_EQ(f, -13.0f / 8.0f);
  uint16_t h;
  std::memcpy(&h, file.tensors.at("py.f16").data.data(), 2);
  EXPECT_EQ(h, 0xc640);  // -6.25: sign, exponent 17, mantissa 0x240
  std::memcpy(&h, file.tensors.at("py.bf16").data.data(), 2);
  EXPECT_EQ(h, 0xc0c8);  // -6.25
}

TEST_F(Interop, PythonReadsOurFile) {
  const fs::path path = dir_ / "from_cpp.safetensors";
  std::map<std::string, TensorRecord> records;
  records.emplace("cpp.f32", formula_record(DType::f32, {4, 5}));
  records.emplace("cpp.f16", formula_record(DType::f16, {3, 3}));
  records.emplace("cpp.bf16", formula_record(DType::bf16, {11}));
  records.emplace("cpp.i32", formula_record(DType::i32, {2, 2, 2}));
  records.emplace("cpp.u32", formula_record(DType::u32, {9}));
  records.emplace("cpp.f64", formula_record(DType::f64, {1, 6}));
  records.emplace("cpp.scalar", formula_record(DType::i32, {}));
  records.emplace("cpp.empty", formula_record(DType::f16, {4, 0}));
  NamedTensorViews views;
  std::string names;
  for (const auto& [name, r] : records) {
    views.emplace_back(name, r.view());
    names += " " + name;
  }
  write_safetensors(path, views, {{"writer", "meganeura"}});
  auto [status, output] = run(std::string(kPython) + " " + kScript + " read " + path.string() + names);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("checked 8 tensors, 64 elements, metadata {\"writer\": \"meganeura\"}"), std::string::npos)
      << output;
}

}  // namespace
}  // namespace meganeura::io::testing
