// The reader's stated limits (safetensors.h): each is enforced with an error naming it, and a
// file just inside each limit still loads.
#include "io_test_util.h"

namespace meganeura::io::testing {
namespace {

class Limits : public ScratchDir {
 protected:
  std::string load_error(const std::string& bytes) {
    const fs::path path = dir_ / "limits.safetensors";
    write_raw(path, bytes);
    return error_of([&] { read_safetensors(path); });
  }
};

std::string shape_of_rank(size_t rank) {
  std::string shape = "[";
  for (size_t i = 0; i < rank; ++i) shape += i ? ",1" : "1";
  return shape + "]";
}

TEST_F(Limits, Rank) {
  const std::string data(4, '\0');
  auto file = [&](size_t rank) {
    return raw_file(R"({"w":{"dtype":"F32","shape":)" + shape_of_rank(rank) + R"(,"data_offsets":[0,4]}})", data);
  };
  EXPECT_EQ(load_error(file(kMaxFileRank)), "");
  const std::string error = load_error(file(kMaxFileRank + 1));
  EXPECT_NE(error.find("tensor 'w': rank 65 exceeds the limit of 64 dimensions (kMaxFileRank)"), std::string::npos)
      << error;
}

TEST_F(Limits, TensorCount) {
  // Entries are counted as they are parsed, so their (invalid) contents never matter here.
  auto header = [](size_t n) {
    std::string h = R"({"__metadata__":{})";
    for (size_t i = 0; i < n; ++i) h += ",\"t" + std::to_string(i) + "\":0";
    return h + "}";
  };
  const std::string at_limit = load_error(raw_file(header(kMaxTensorCount)));
  EXPECT_EQ(at_limit.find("kMaxTensorCount"), std::string::npos) << at_limit;
  EXPECT_NE(at_limit.find("entry is not a JSON object"), std::string::npos) << at_limit;
  const std::string over = load_error(raw_file(header(kMaxTensorCount + 1)));
  EXPECT_NE(over.find("more than 262144 tensors, the limit (kMaxTensorCount)"), std::string::npos) << over;
}

// A shape nested a million levels deep: its error message used to dump() it recursively and
// overflow the stack. Now the header's nesting is bounded while parsing.
TEST_F(Limits, Nesting) {
  const size_t depth = 1'000'000;
  const std::string deep = R"({"w":{"dtype":"F32","shape":[)" + std::string(depth, '[') + std::string(depth, ']') +
                           R"(],"data_offsets":[0,4]}})";
  const std::string error = load_error(raw_file(deep, std::string(4, '\0')));
  EXPECT_NE(error.find("header nests deeper than the limit of 64 levels (kMaxHeaderNesting)"), std::string::npos)
      << error;
  // Within the limit the entry is read and rejected for what it is.
  const std::string shallow = R"({"w":{"dtype":"F32","shape":[[[1]]],"data_offsets":[0,4]}})";
  EXPECT_NE(load_error(raw_file(shallow, std::string(4, '\0'))).find("dimension [[1]] is not a valid size"),
            std::string::npos);
}

}  // namespace
}  // namespace meganeura::io::testing
