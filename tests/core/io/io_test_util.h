// Helpers shared by the safetensors tests: scratch directories, tensors, raw files.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "meganeura/safetensors.h"

namespace meganeura::io::testing {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("meganeura-io-" + std::to_string(::getpid()) + "-" + info->test_suite_name() + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

inline std::vector<std::byte> to_bytes(const void* data, size_t n) {
  std::vector<std::byte> out(n);
  if (n) std::memcpy(out.data(), data, n);
  return out;
}

template <typename T>
TensorRecord make_record(DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  return TensorRecord{dtype, std::move(shape), to_bytes(values.data(), values.size() * sizeof(T))};
}

inline void write_raw(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string read_raw(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// An 8-byte little-endian length followed by `header` and `data`, built by hand so that
// tests do not depend on the writer under test.
inline std::string raw_file(const std::string& header, const std::string& data = {},
                            uint64_t claimed_length = UINT64_MAX) {
  uint64_t n = claimed_length == UINT64_MAX ? header.size() : claimed_length;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

// Runs `fn` and returns the io::Error message ("" when nothing was thrown); any other
// exception type fails the test.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
    return "unexpected";
  }
  return "";
}

}  // namespace meganeura::io::testing
