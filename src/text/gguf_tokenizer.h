// Byte-level BPE tokenizers in GGUF files (the tokenizer.* keys; docs/gguf.md).
//
// Reading prefers `tokenizer.huggingface.json` (the whole tokenizer.json, as this library writes
// it); otherwise the tokenizer is rebuilt from llama.cpp's keys: tokenizer.ggml.model "gpt2"
// (byte-level BPE; SentencePiece models are refused), tokens, merges, token_type (3, control:
// a special added token; 4, user-defined: an added token) and pre, the pre-tokenizer's name
// ("gpt-2" or "default", "smollm", "llama-bpe" or "llama3", "qwen2"; absent: "gpt-2").
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meganeura/gguf.h"
#include "text/tokenizer.h"

namespace meganeura::text {

// The tokenizer of a GGUF file; TokenizerError naming the key when it has none or a malformed one.
Tokenizer tokenizer_from_gguf(const io::GgufFile& file);

// The keys that hold a tokenizer.json's tokenizer in a GGUF file: llama.cpp's (with the
// pre-tokenizer's name when it is one of those above) and tokenizer.huggingface.json; with
// tokenizer.ggml.bos_token_id and eos_token_id when given. TokenizerError as from_json.
std::vector<std::pair<std::string, io::GgufValue>> gguf_tokenizer_metadata(std::string_view tokenizer_json,
                                                                           std::string_view origin,
                                                                           std::optional<int> bos,
                                                                           std::optional<int> eos);

// tokenizer.ggml.eos_token_id, when the file has one.
std::vector<int> gguf_eos_token_ids(const io::GgufFile& file);

}  // namespace meganeura::text
