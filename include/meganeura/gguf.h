// Reading and writing GGUF files (version 3), the single-file model format of llama.cpp and
// ggml, and the block formats their weights are stored in.
//
// Layout, all little-endian: the magic "GGUF", a u32 version, a u64 tensor count and a u64
// metadata count; the metadata, each a string key, a u32 value type and the value (arrays: a
// u32 element type, a u64 count and the elements); the tensor infos, each a name, a u32
// dimension count, the dimensions as u64 (fastest-varying first), a u32 element type and a u64
// offset into the data section; padding to the alignment (metadata key general.alignment, a
// u32, default 32); then the data section, each tensor at its offset, a multiple of the
// alignment. Strings are a u64 byte count and the bytes, without a terminator.
//
// Files come from other programs, so the reader treats them as untrusted, like the safetensors
// reader: every count, length and offset is checked against the file and the limits below
// before anything is allocated, and every problem is an io::Error naming the file and what is
// wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "meganeura/safetensors.h"  // io::Error

namespace meganeura::io {

// Limits a file may declare; each enforced with an io::Error naming it.
inline constexpr uint64_t kGgufMaxTensors = 1u << 18;
inline constexpr uint64_t kGgufMaxMetadata = 1u << 16;
inline constexpr uint64_t kGgufMaxString = 1u << 24;          // bytes of one key, name or value
inline constexpr uint64_t kGgufMaxArray = uint64_t(1) << 26;  // elements of one array (a vocabulary has ~10^5)
inline constexpr uint32_t kGgufMaxRank = 4;                   // dimensions of a tensor (ggml's limit)
inline constexpr uint32_t kGgufMaxNesting = 4;                // arrays of arrays

// Element types of GGUF tensors, with the format's numbers: the ones this module reads,
// writes and decodes (a file with another type is refused, naming it).
enum class GgmlType : uint32_t { f32 = 0, f16 = 1, q4_0 = 2, q8_0 = 8, q4_k = 12, bf16 = 30 };

// A type's block: `block` elements take `block_bytes` bytes (1 and the element size for
// f32, f16 and bf16). nullopt for a type this module does not know.
struct GgmlBlock {
  std::string_view name;
  int64_t block;
  int64_t block_bytes;
};
std::optional<GgmlBlock> ggml_block(uint32_t type);

// Metadata value types, with the format's numbers.
enum class GgufType : uint32_t { u8, i8, u16, i16, u32, i32, f32, boolean, string, array, u64, i64, f64 };

struct GgufValue;
struct GgufArray {
  GgufType element = GgufType::u8;
  std::vector<GgufValue> items;
  bool operator==(const GgufArray&) const;
};
// One metadata value: the alternative's index is its GgufType's number.
struct GgufValue {
  std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string, GgufArray, uint64_t,
               int64_t, double>
      v;
  GgufType type() const { return GgufType(v.index()); }
  // The value as an integer (any integer type, or a bool), a float (f32 or f64) or a string;
  // nullopt for another type or an integer that does not fit.
  std::optional<int64_t> integer() const;
  std::optional<double> number() const;
  const std::string* string() const { return std::get_if<std::string>(&v); }
  const GgufArray* array() const { return std::get_if<GgufArray>(&v); }
  bool operator==(const GgufValue&) const = default;  // floats by value: NaN differs from itself
};
inline bool GgufArray::operator==(const GgufArray& o) const { return element == o.element && items == o.items; }

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // row-major (slowest first): the file's dimensions reversed
  uint32_t type = uint32_t(GgmlType::f32);
  uint64_t offset = 0;  // from the start of the data section
  uint64_t bytes = 0;   // the data's size, from the type's block
  int64_t numel() const;
};

struct GgufFile {
  std::filesystem::path source;
  uint32_t version = 3;
  std::vector<std::pair<std::string, GgufValue>> metadata;  // in file order, keys unique
  std::vector<GgufTensorInfo> tensors;                      // in file order, names unique
  uint64_t alignment = 32;
  uint64_t data_start = 0;  // absolute offset of the data section
  uint64_t file_bytes = 0;

  const GgufValue* find(std::string_view key) const;
  const GgufTensorInfo* tensor(std::string_view name) const;
};

// Reads and validates the header, metadata and tensor infos: every tensor lies in the file,
// aligned, of a known type (or, for an unknown type, is refused naming it), with no two
// overlapping. Version 2 files (the same layout) are read too.
GgufFile read_gguf(const std::filesystem::path& path);

// A read-only memory map of a GGUF file: tensor data without copying.
class GgufMap {
 public:
  explicit GgufMap(const std::filesystem::path& path);
  GgufMap(const GgufMap&) = delete;
  GgufMap& operator=(const GgufMap&) = delete;
  ~GgufMap();
  const GgufFile& file() const { return file_; }
  // The tensor's bytes; io::Error naming the tensor when there is none of that name.
  std::span<const std::byte> data(std::string_view name) const;

 private:
  GgufFile file_;
  const std::byte* base_ = nullptr;
  size_t size_ = 0;
};

// A tensor to write: its bytes already in `type`'s layout.
struct GgufTensorView {
  std::string name;
  uint32_t type = uint32_t(GgmlType::f32);
  std::vector<int64_t> shape;  // row-major, as GgufTensorInfo's
  std::span<const std::byte> data;
};

// Writes a version 3 file atomically (see write_safetensors), tensors in the given order, each
// at the next multiple of `alignment` (a power of two; a general.alignment key in `metadata`
// must agree with it). io::Error for a duplicate key or name, a tensor whose bytes do not
// match its type and shape, or an OS error.
void write_gguf(const std::filesystem::path& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                const std::vector<GgufTensorView>& tensors, uint64_t alignment = 32);

// ---- Block formats ----------------------------------------------------------------------
// Q8_0: blocks of 32, an f16 scale d = max|x| / 127 and 32 signed bytes round(x / d).
// Q4_0: blocks of 32, an f16 scale d = m / -8 (m the entry of largest magnitude, sign kept)
// and 16 bytes of 4-bit q = min(15, floor(x / d + 8.5)), byte j holding entries j (low
// nibble) and j + 16 (high); x = (q - 8) d.
// Q4_K: super-blocks of 256, an f16 scale and an f16 min scale, twelve bytes packing eight
// 6-bit scales and eight 6-bit mins, and 128 bytes of 4-bit values: sub-block s of 32 is
// x = d scale_s q - dmin min_s.

// Quantises n values (a multiple of the block) into `type` (q8_0, q4_0, q4_k, f16, bf16 or
// f32); std::invalid_argument otherwise.
std::vector<std::byte> quantize(GgmlType type, std::span<const float> x);
// Decodes n values of `type` (any type above); std::invalid_argument when `data` does not hold
// exactly out.size() values.
void dequantize(uint32_t type, std::span<const std::byte> data, std::span<float> out);

}  // namespace meganeura::io
