// `meganeura tokenize`: lines to JSON arrays of ids and back, and its errors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_run.h"

namespace {

using nlohmann::json;

// A byte-level vocabulary: ids 0..255 the bytes, 256 "ab" (one merge), 300 a special token.
std::filesystem::path write_tokenizer(const std::filesystem::path& dir) {
  json vocab = json::object();
  uint32_t next = 256;
  auto utf8 = [](uint32_t c) {
    std::string s;
    if (c < 0x80) {
      s += static_cast<char>(c);
    } else {
      s += static_cast<char>(0xC0 | (c >> 6));
      s += static_cast<char>(0x80 | (c & 0x3F));
    }
    return s;
  };
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    vocab[utf8(printable ? b : next++)] = b;
  }
  vocab["ab"] = 256;
  json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b"})}}},
            {"added_tokens", json::array({{{"id", 300}, {"content", "<|end|>"}, {"special", true}}})},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}}},
            {"decoder", {{"type", "ByteLevel"}}}};
  auto path = dir / "tokenizer.json";
  std::ofstream(path) << j.dump();
  return path;
}

TEST(TokenizeCli, EncodesLinesAndDecodesThemBack) {
  auto dir = cli_run::temp_dir("meganeura-tokenize-");
  auto tok = write_tokenizer(dir);
  std::ofstream(dir / "in.txt") << "ab c\n\n€<|end|>\n";
  auto enc = cli_run::run("tokenize --tokenizer " + tok.string() + " < " + (dir / "in.txt").string(), dir);
  ASSERT_EQ(enc.status, 0) << enc.err;
  EXPECT_EQ(enc.out, "[256,32,99]\n[]\n[226,130,172,300]\n");
  std::ofstream(dir / "ids.txt") << enc.out;
  auto dec = cli_run::run("tokenize --decode --tokenizer " + tok.string() + " < " + (dir / "ids.txt").string(), dir);
  ASSERT_EQ(dec.status, 0) << dec.err;
  EXPECT_EQ(dec.out, "ab c\n\n€<|end|>\n");
  std::filesystem::remove_all(dir);
}

TEST(TokenizeCli, ErrorsNameTheFieldOrLine) {
  auto dir = cli_run::temp_dir("meganeura-tokenize-errors-");
  auto tok = write_tokenizer(dir);
  std::ofstream(dir / "bad.json") << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}})";
  auto r = cli_run::run("tokenize --tokenizer " + (dir / "bad.json").string() + " < /dev/null", dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("model.merges[0]"), std::string::npos) << r.err;
  std::ofstream(dir / "ids.txt") << "[1,2]\n[1, \"x\"]\n";
  r = cli_run::run("tokenize --decode --tokenizer " + tok.string() + " < " + (dir / "ids.txt").string(), dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("stdin line 2"), std::string::npos) << r.err;
  std::ofstream(dir / "ids.txt") << "[1,2]\n[400]\n";
  r = cli_run::run("tokenize --decode --tokenizer " + tok.string() + " < " + (dir / "ids.txt").string(), dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("line 2: id 400 is not in the vocabulary"), std::string::npos) << r.err;
  std::ofstream(dir / "in.txt") << "fine\nbad \xFF byte\n";
  r = cli_run::run("tokenize --tokenizer " + tok.string() + " < " + (dir / "in.txt").string(), dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("stdin line 2: tokenizer: input is not valid UTF-8 at byte 4"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
