// The tokenizer on small hand-made vocabularies: merges by rank in both file forms,
// ignore_merges, added and special tokens, the split patterns, malformed files (the error
// names the field), and streaming decoding of characters split over tokens.
#include "text/tokenizer.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "text/bpe.h"
#include "text/pretokenize.h"
#include "text/utf8.h"

namespace meganeura::text {
namespace {

using nlohmann::json;

// The vocabulary string of some bytes (each byte as its alphabet character).
std::string bl(std::string_view bytes) {
  std::string s;
  for (char c : bytes) utf8_append(s, byte_to_char(static_cast<uint8_t>(c)));
  return s;
}

// Ids 0..255: the single bytes; then `extra` tokens from 256 on, in order.
json make_tokenizer(const std::vector<std::string>& extra, const json& merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bl(std::string(1, static_cast<char>(b)))] = b;
  int id = 256;
  for (const auto& t : extra) vocab[bl(t)] = id++;
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}}}};
}

Tokenizer load(const json& j) { return Tokenizer::from_json(j.dump()); }

std::vector<int> bytes_of(std::string_view s) {
  std::vector<int> ids;
  for (char c : s) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

TEST(Tokenizer, MergesApplyByRankNotByPosition) {
  // "b c" outranks "a b": "abc" must become [a, bc], although "ab" comes first in the word.
  Tokenizer t = load(make_tokenizer({"bc", "ab"}, json::array({bl("b") + " " + bl("c"), bl("a") + " " + bl("b")})));
  EXPECT_EQ(t.encode("abc"), (std::vector<int>{'a', 256}));
  Tokenizer u = load(make_tokenizer({"bc", "ab"}, json::array({bl("a") + " " + bl("b"), bl("b") + " " + bl("c")})));
  EXPECT_EQ(u.encode("abc"), (std::vector<int>{257, 'c'}));
}

TEST(Tokenizer, EqualRanksMergeLeftmostFirst) {
  Tokenizer t = load(make_tokenizer({"aa"}, json::array({bl("a") + " " + bl("a")})));
  EXPECT_EQ(t.encode("aaa"), (std::vector<int>{256, 'a'}));
  EXPECT_EQ(t.encode("aaaa"), (std::vector<int>{256, 256}));
}

TEST(Tokenizer, MergesInArrayFormEqualStringForm) {
  std::vector<std::string> extra = {"he", "ll", "hell", "hello"};
  json strings = json::array({"h e", "l l", "he ll", "hell o"});
  json pairs = json::array(
      {json::array({"h", "e"}), json::array({"l", "l"}), json::array({"he", "ll"}), json::array({"hell", "o"})});
  Tokenizer a = load(make_tokenizer(extra, strings));
  Tokenizer b = load(make_tokenizer(extra, pairs));
  EXPECT_EQ(a.encode("hello"), std::vector<int>{259});
  EXPECT_EQ(b.encode("hello hell"), a.encode("hello hell"));
  EXPECT_EQ(a.encode(" hello"), (std::vector<int>{' ', 259}));  // the space is its own byte token
}

TEST(Tokenizer, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  json j = make_tokenizer({"xyz"}, json::array());
  EXPECT_EQ(load(j).encode("xyz"), bytes_of("xyz"));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(j).encode("xyz"), std::vector<int>{256});
}

TEST(Tokenizer, AddedTokensAreMatchedBeforePreTokenization) {
  json j = make_tokenizer({}, json::array());
  j["added_tokens"] = json::array({{{"id", 300}, {"content", "<|s|>"}, {"special", true}},
                                   {{"id", 301}, {"content", "<a"}, {"special", false}},
                                   {{"id", 302}, {"content", "<ab"}, {"special", false}}});
  Tokenizer t = load(j);
  // Without the added token, "x<|s|>y" would split at the punctuation; here it is one id.
  EXPECT_EQ(t.encode("x<|s|>y"), (std::vector<int>{'x', 300, 'y'}));
  EXPECT_EQ(t.encode("<|s|><|s|>"), (std::vector<int>{300, 300}));
  EXPECT_EQ(t.encode("<abc <a"), (std::vector<int>{302, 'c', ' ', 301}));  // longest first
  EXPECT_EQ(t.decode(t.encode("x<|s|>y <ab")), "x<|s|>y <ab");             // special tokens decode as text
  EXPECT_EQ(t.added_tokens().size(), 3u);
  EXPECT_TRUE(t.added_tokens()[0].special);
  EXPECT_FALSE(t.added_tokens()[1].special);
}

TEST(Tokenizer, EveryByteRoundTrips) {
  Tokenizer t = load(make_tokenizer({}, json::array()));
  std::string s = "tab\there, CR\r\nNUL-free \x01\x7f é 日本 🏳️‍🌈";
  EXPECT_EQ(t.encode(s), bytes_of(s));
  EXPECT_EQ(t.decode(t.encode(s)), s);
}

TEST(Tokenizer, InvalidUtf8InputIsRefused) {
  Tokenizer t = load(make_tokenizer({}, json::array()));
  try {
    t.encode("ok \xC3 then");
    FAIL() << "no error";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8 at byte 3"), std::string::npos) << e.what();
  }
}

std::vector<std::string> pieces(std::string_view s, std::vector<PreTokenizerStep> steps) {
  CodePoints cps;
  cps.assign(s);
  std::vector<Piece> out;
  pre_tokenize(cps, steps, out);
  std::vector<std::string> r;
  for (auto [a, b] : out) r.emplace_back(s.substr(a, b - a));
  return r;
}

TEST(PreTokenizer, KnownPatternsSplitAsTheRegexDoes) {
  using V = std::vector<std::string>;
  using K = PreTokenizerStep::Kind;
  std::string s = "Hello world's  123456 \n\n x";
  EXPECT_EQ(pieces(s, {{.kind = K::kSplit, .pattern = SplitPattern::kLlama3}}),
            (V{"Hello", " world", "'s", " ", " ", "123", "456", " \n\n", " x"}));
  EXPECT_EQ(pieces(s, {{.kind = K::kSplit, .pattern = SplitPattern::kQwen2}}),
            (V{"Hello", " world", "'s", " ", " ", "1", "2", "3", "4", "5", "6", " \n\n", " x"}));
  EXPECT_EQ(pieces(s, {{.kind = K::kByteLevelRegex}}), (V{"Hello", " world", "'s", " ", " 123456", " \n\n", " x"}));
  // Case-insensitive contractions in Llama 3's pattern, case-sensitive in GPT-2's.
  EXPECT_EQ(pieces("I'LL", {{.kind = K::kSplit, .pattern = SplitPattern::kLlama3}}), (V{"I", "'LL"}));
  EXPECT_EQ(pieces("I'LL", {{.kind = K::kByteLevelRegex}}), (V{"I", "'", "LL"}));
  // Punctuation takes trailing newlines; a letter run takes one leading non-letter.
  EXPECT_EQ(pieces("a.\n\nb  $c", {{.kind = K::kSplit, .pattern = SplitPattern::kLlama3}}),
            (V{"a", ".\n\n", "b", " ", " $", "c"}));
  EXPECT_EQ(pieces("x  ", {{.kind = K::kSplit, .pattern = SplitPattern::kLlama3}}), (V{"x", "  "}));
  EXPECT_EQ(pieces("a1b22", {{.kind = K::kDigits, .individual_digits = true}}), (V{"a", "1", "b", "2", "2"}));
  EXPECT_EQ(pieces("a1b22", {{.kind = K::kDigits, .individual_digits = false}}), (V{"a", "1", "b", "22"}));
  EXPECT_TRUE(known_split_pattern("\\s+").has_value() == false);
}

// One malformed file per row: the error must name the field.
TEST(Tokenizer, MalformedFilesNameTheField) {
  struct Case {
    std::function<void(json&)> spoil;
    std::string field;
  };
  std::vector<Case> cases = {
      {[](json& j) { j.erase("model"); }, "tokenizer.json: model: missing"},
      {[](json& j) { j["model"]["type"] = "Unigram"; }, "model.type"},
      {[](json& j) { j["model"]["vocab"] = json::array(); }, "model.vocab"},
      {[](json& j) { j["model"]["vocab"]["q!"] = -1; }, "model.vocab[\"q!\"]"},
      {[](json& j) { j["model"]["vocab"]["q!"] = "7"; }, "model.vocab[\"q!\"]"},
      {[](json& j) { j["model"]["vocab"]["q!"] = 5; }, "id 5 is given to another token"},
      {[](json& j) { j["model"]["merges"] = json::array({"ab"}); }, "model.merges[0]: expected two tokens"},
      {[](json& j) { j["model"]["merges"] = json::array({"a zz"}); }, "model.merges[0]: token \"zz\""},
      {[](json& j) { j["model"]["merges"] = json::array({"a b"}); }, "model.merges[0]: token \"ab\""},
      {[](json& j) { j["model"]["merges"] = json::array({json::array({"a"})}); }, "model.merges[0]"},
      {[](json& j) {
         j["model"]["merges"] = json::array({json::array({"a", 3})});
       },
       "model.merges[0][1]"},
      {[](json& j) { j["model"]["byte_fallback"] = true; }, "model.byte_fallback"},
      {[](json& j) { j["model"]["unk_token"] = "<unk>"; }, "model.unk_token"},
      {[](json& j) {
         j["added_tokens"] = json::array({{{"id", "x"}, {"content", "<s>"}}});
       },
       "added_tokens[0].id"},
      {[](json& j) {
         j["added_tokens"] = json::array({{{"id", 9}}});
       },
       "added_tokens[0].content: missing"},
      {[](json& j) {
         j["added_tokens"] = json::array({{{"id", 9}, {"content", "<s>"}, {"lstrip", true}}});
       },
       "added_tokens[0].lstrip"},
      {[](json& j) {
         j["normalizer"] = {{"type", "Lowercase"}};
       },
       "normalizer.type: unsupported normalizer"},
      {[](json& j) {
         json split = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}};
         j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({split})}};
       },
       "pre_tokenizer.pretokenizers[0].pattern.Regex: unsupported pattern \"\\s+\""},
      {[](json& j) {
         j["pre_tokenizer"] = {{"type", "Digits"}};
       },
       "pre_tokenizer: no ByteLevel step"},
      {[](json& j) {
         j["pre_tokenizer"] = {{"type", "Whitespace"}};
       },
       "pre_tokenizer.type"},
      {[](json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       "decoder.type"},
      {[](json& j) { j.erase("decoder"); }, "decoder: missing"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    json j = make_tokenizer({}, json::array());
    cases[i].spoil(j);
    try {
      load(j);
      ADD_FAILURE() << "case " << i << " (" << cases[i].field << ") loaded";
    } catch (const TokenizerError& e) {
      EXPECT_NE(std::string(e.what()).find(cases[i].field), std::string::npos) << "case " << i << ": " << e.what();
    }
  }
  EXPECT_THROW(Tokenizer::from_json("{\"model\": "), TokenizerError);
  EXPECT_THROW(Tokenizer::from_json("[]"), TokenizerError);
  EXPECT_THROW(Tokenizer::from_file("/nonexistent/tokenizer.json"), TokenizerError);
}

TEST(StreamDecoder, HoldsBackACharacterSplitOverTokens) {
  json j = make_tokenizer({"\xF0\x9F"}, json::array());  // a token holding half an emoji
  Tokenizer t = load(j);
  StreamDecoder d(t);
  EXPECT_EQ(d.push('a'), "a");
  EXPECT_EQ(d.push(0xC3), "");  // first byte of é
  EXPECT_EQ(d.push(0xA9), "é");
  EXPECT_EQ(d.push(256), "");  // F0 9F of 😀 (F0 9F 98 80)
  EXPECT_EQ(d.push(0x98), "");
  EXPECT_EQ(d.push(0x80), "😀");
  EXPECT_EQ(d.push(0xFF), "\xEF\xBF\xBD");  // never valid: replaced at once
  EXPECT_EQ(d.push(0xE6), "");
  EXPECT_EQ(d.push('x'), "\xEF\xBF\xBDx");  // a character cut short by the next token
  EXPECT_EQ(d.push(0xE6), "");
  EXPECT_EQ(d.finish(), "\xEF\xBF\xBD");  // the stream ended inside a character
  EXPECT_EQ(d.finish(), "");
  // The streamed pieces join to what decoding all ids at once gives.
  std::vector<int> ids = {0xE6, 0x97, 0xA5, 0xC3, 'b', 256, 0x98, 0x80};
  StreamDecoder e(t);
  std::string joined;
  for (int id : ids) joined += e.push(id);
  joined += e.finish();
  EXPECT_EQ(joined, t.decode(ids));
  EXPECT_EQ(joined,
            "日\xEF\xBF\xBD"
            "b😀");
  EXPECT_THROW(d.push(99999), TokenizerError);
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("a\xF0\x9F\x98z"), "a\xEF\xBF\xBDz");                      // one truncated sequence: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong: each byte
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(utf8_incomplete_tail("ab\xE6\x97"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("ab\xE6\x97\xA5"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("ab\x97"), 0u);
}

}  // namespace
}  // namespace meganeura::text
