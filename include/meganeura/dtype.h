// Element types of tensors, shared by the graph, the backends and the checkpoint format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace meganeura {

// q8_0 and q4_0 are block formats (GGUF's, meganeura/gguf.h) for weights: a tensor of those
// types is stored in whole blocks along its last axis, and only matmul_q reads one.
enum class DType : uint8_t { f32, f16, bf16, i32, u32, f64, q8_0, q4_0 };

// Bytes per element; 0 for the block formats (see dtype_block).
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32:
    case DType::u32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::f64: return 8;
    case DType::q8_0:
    case DType::q4_0: return 0;
  }
  return 0;
}

// A block of `elements` values takes `bytes` bytes (1 and the element size for plain types).
struct DTypeBlock {
  int64_t elements, bytes;
};
constexpr DTypeBlock dtype_block(DType t) {
  if (t == DType::q8_0) return {32, 34};
  if (t == DType::q4_0) return {32, 18};
  return {1, int64_t(dtype_size(t))};
}
constexpr bool dtype_is_block(DType t) { return t == DType::q8_0 || t == DType::q4_0; }
// The bytes of n values (n a whole number of blocks).
constexpr uint64_t storage_bytes(DType t, int64_t n) {
  const DTypeBlock b = dtype_block(t);
  return uint64_t(n / b.elements) * uint64_t(b.bytes);
}

// Our spelling ("f32") and the safetensors spelling ("F32").
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::u32: return "u32";
    case DType::f64: return "f64";
    case DType::q8_0: return "q8_0";
    case DType::q4_0: return "q4_0";
  }
  return "?";
}

constexpr std::string_view dtype_safetensors_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::u32: return "U32";
    case DType::f64: return "F64";
    case DType::q8_0:
    case DType::q4_0: return "?";  // safetensors has no block types: checkpoints hold f32
  }
  return "?";
}

constexpr std::optional<DType> dtype_from_safetensors_name(std::string_view s) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u32, DType::f64}) {
    if (dtype_safetensors_name(t) == s) return t;
  }
  return std::nullopt;
}

constexpr bool dtype_is_float(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64;
}

// Converts n values from one storage dtype to another (f16/bf16 round to nearest even, floats
// to integers truncate, floats to a block format quantise whole blocks as GGUF does): what
// crosses the API is converted to each buffer's stored type.
void convert_values(DType from, const void* src, DType to, void* dst, int64_t n);

}  // namespace meganeura
