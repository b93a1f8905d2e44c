// meganeura tokenize: a Hugging Face tokenizer.json applied to stdin, one line at a time.
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "commands.h"
#include "text/tokenizer.h"

namespace meganeura::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  bool decode = false;
};

// Each line of text (without its newline) to one JSON array of ids.
int encode_lines(const text::Tokenizer& tok) {
  std::string line, out;
  for (size_t n = 1; std::getline(std::cin, line); ++n) {
    std::vector<int> ids;
    try {
      ids = tok.encode(line);
    } catch (const text::TokenizerError& e) {
      throw std::runtime_error("tokenize: stdin line " + std::to_string(n) + ": " + e.what());
    }
    out.assign(1, '[');
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(ids[i]);
    }
    out += "]\n";
    std::cout << out;
  }
  return 0;
}

// Each line, a JSON array of ids, to the text it stands for.
int decode_lines(const text::Tokenizer& tok) {
  std::string line;
  for (size_t n = 1; std::getline(std::cin, line); ++n) {
    std::string where = "tokenize --decode: stdin line " + std::to_string(n) + ": ";
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_array()) throw std::runtime_error(where + "expected a JSON array of token ids");
    std::vector<int> ids;
    for (const auto& v : j) {
      if (!v.is_number_integer()) throw std::runtime_error(where + "expected integer ids, got " + v.dump());
      auto id = v.get<int64_t>();
      if (id < 0 || static_cast<uint64_t>(id) >= tok.vocab_size())
        throw std::runtime_error(where + "id " + std::to_string(id) + " is not in the vocabulary");
      ids.push_back(static_cast<int>(id));
    }
    try {
      std::cout << tok.decode(ids) << '\n';
    } catch (const text::TokenizerError& e) {
      throw std::runtime_error(where + e.what());
    }
  }
  return 0;
}

int run_tokenize(const TokenizeOptions& o) {
  std::ios::sync_with_stdio(false);
  text::Tokenizer tok = [&] {
    try {
      return text::Tokenizer::from_file(o.tokenizer);
    } catch (const text::TokenizerError& e) {
      throw std::runtime_error(std::string("tokenize: ") + e.what());
    }
  }();
  int status = o.decode ? decode_lines(tok) : encode_lines(tok);
  std::cout.flush();
  return status;
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* c = app.add_subcommand("tokenize",
                                   "encode stdin with a Hugging Face tokenizer.json: one JSON array of ids per line "
                                   "(no special tokens added); --decode: one array per line back to text");
  c->add_option("--tokenizer", o->tokenizer, "tokenizer.json (byte-level BPE)")->required();
  c->add_flag("--decode", o->decode, "read JSON arrays of ids, print the text");
  c->callback([o] { throw CLI::RuntimeError(run_tokenize(*o)); });
}

}  // namespace meganeura::cli
