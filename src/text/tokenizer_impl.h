// The loaded form of a tokenizer.json, shared by the loader and the encoder.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "text/bpe.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace meganeura::text {

struct Tokenizer::Impl {
  BpeModel model;
  std::vector<std::string> id_bytes;  // what each id stands for (empty for unused ids)
  std::vector<AddedToken> added;
  // Added tokens by first byte, longest first, as indices into `added`.
  std::vector<std::vector<size_t>> added_by_byte = std::vector<std::vector<size_t>>(256);
  std::vector<NormalForm> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizer;
  bool add_prefix_space = false;

  void encode_segment(std::string_view segment, std::vector<int>& out) const;
};

// Fills `impl` from the text of a tokenizer.json; throws TokenizerError naming the field.
void load_tokenizer_json(std::string_view json, std::string_view origin, Tokenizer::Impl& impl);

}  // namespace meganeura::text
