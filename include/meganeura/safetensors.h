// Reading and writing safetensors files, and the checkpoint conventions built on them.
//
// Format (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON, then the tensor data. The JSON maps each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the end of the
// header) and may hold "__metadata__", a string-to-string map. The tensors must tile the
// data section exactly: no holes, no overlap, nothing after the last one.
//
// Files come from other programs and other machines, so the reader treats them as
// untrusted: every size is checked against the file before anything is allocated, and
// every problem is an io::Error whose one-line message names the file and what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "meganeura/dtype.h"

namespace meganeura::io {

// Every failure of this module: a corrupt or mismatched file, or an OS error.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Limits on what a file may declare, each enforced with an io::Error naming it. They bound
// what a hostile header can make the reader allocate or recurse into before any data is read.
// Largest accepted JSON header; the reference implementation uses the same bound.
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
// Most tensors in one file (real checkpoints hold hundreds to a few tens of thousands).
inline constexpr size_t kMaxTensorCount = 1u << 18;
// Most dimensions of one tensor.
inline constexpr size_t kMaxFileRank = 64;
// Deepest nesting of JSON arrays and objects in the header (a valid header needs 3).
inline constexpr size_t kMaxHeaderNesting = 64;

// A tensor to write, borrowed from the caller so that writing copies nothing.
struct TensorView {
  DType dtype = DType::f32;
  std::span<const int64_t> shape;
  std::span<const std::byte> data;  // row-major, little-endian, numel * dtype_size bytes
};

// A tensor that owns its bytes (row-major, little-endian).
struct TensorRecord {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;

  TensorView view() const { return {dtype, shape, data}; }
  int64_t numel() const;
};

// One header entry: where a tensor lives, without its bytes.
struct TensorInfo {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::map<std::string, std::string> metadata;
  std::map<std::string, TensorInfo> tensors;
  uint64_t data_start = 0;  // absolute file offset of the data section
};

struct SafetensorsFile {
  std::filesystem::path source;  // where it was read from (empty when built in memory)
  std::map<std::string, std::string> metadata;
  std::map<std::string, TensorRecord> tensors;
};

using NamedTensorViews = std::vector<std::pair<std::string, TensorView>>;

// Writes atomically: a temporary file in the same directory is written, fsynced and
// renamed over `path`, then the directory is fsynced. On failure the temporary file is
// removed, an existing file at `path` is left untouched, and io::Error names the path
// and the OS error. Tensors are laid out in name order; the header is padded with
// spaces so the data section starts 8-byte aligned.
void write_safetensors(const std::filesystem::path& path, const NamedTensorViews& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads and validates the whole file; the data is read straight into the records.
SafetensorsFile read_safetensors(const std::filesystem::path& path);

// Validates the whole file but reads only the tensors `wanted` accepts (an inference
// program skips the optimizer state this way, never allocating it).
SafetensorsFile read_safetensors(const std::filesystem::path& path,
                                 const std::function<bool(const std::string& name)>& wanted);

// Reads and validates only the header (names, dtypes, shapes, offsets, metadata).
SafetensorsHeader read_safetensors_header(const std::filesystem::path& path);

// ---- Checkpoints -------------------------------------------------------------------
//
// A checkpoint is a safetensors file holding parameters and optimizer state (Adam moments
// as "adam_m.<param>" and "adam_v.<param>") plus metadata:
//   format = "meganeura-checkpoint", format_version = "1",
//   graph_hash (the training graph's hash), step (decimal integer),
//   layout (JSON text: parameter order and optimizer state names).

using Checkpoint = SafetensorsFile;

inline constexpr const char* kCheckpointFormat = "meganeura-checkpoint";
inline constexpr const char* kCheckpointFormatVersion = "1";

struct ExpectedTensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
};

// Writes `checkpoint` with format and format_version set (overriding nothing else).
void write_checkpoint(const std::filesystem::path& path, const Checkpoint& checkpoint);

// Reads a safetensors file and validates the checkpoint metadata (see below).
Checkpoint read_checkpoint(const std::filesystem::path& path);

// Validates the checkpoint keys that are present: format, format_version, step (a
// non-negative integer) and layout (valid JSON). Files from other writers carry none of
// them and pass. Throws io::Error naming `source` and the key.
void check_checkpoint_metadata(const std::map<std::string, std::string>& metadata, const std::filesystem::path& source);

// Strict loading: the file must hold exactly the expected tensors with the expected dtypes
// and shapes. Throws io::Error whose message names the first offending tensor (with both
// shapes when they differ) and how many other problems there are. Extra tensors named
// "<state>.<expected name>" with <state> in `ignored_state` (e.g. "adam_m") are allowed,
// so an inference program can accept a training checkpoint.
void check_checkpoint_matches(const SafetensorsFile& file, const std::vector<ExpectedTensor>& expected,
                              const std::vector<std::string>& ignored_state = {});

// "[2, 3]"; used in messages.
std::string format_shape(std::span<const int64_t> shape);

}  // namespace meganeura::io
