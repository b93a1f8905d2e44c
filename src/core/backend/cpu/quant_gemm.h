// Products with weights in block formats (q8_0, q4_0; meganeura/dtype.h), f16 or bf16: y = x w^T
// for x [m, k] and w [n, k], the blocks (or values) decoded where they are read. One or a few
// rows (decode) take one dot product per weight row, in AVX-512, AVX2 or scalar code chosen at
// run time; more rows (prefill) decode panels of weight rows into a small f32 buffer and multiply
// them with the f32 GEMM. Rows are split over the backend's pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "meganeura/dtype.h"

namespace meganeura::cpu {

enum class QuantIsa { scalar, avx2, avx512 };
// The best path this CPU runs (AVX-512 needs F, BW; AVX2 needs FMA and F16C too).
QuantIsa quant_isa_supported();
// The path the kernels take: the best supported unless forced (tests, benchmarks); forcing one
// the CPU lacks throws std::invalid_argument. Process-wide.
void force_quant_isa(std::optional<QuantIsa> isa);
QuantIsa quant_isa();
const char* quant_isa_name(QuantIsa isa);

// One weight row of k values, decoded.
void decode_row(DType type, const std::byte* w, float* out, int64_t k);
void decode_row(DType type, const std::byte* w, double* out, int64_t k);

void matmul_q(DType type, const float* x, const std::byte* w, float* y, int64_t m, int64_t n, int64_t k);
// The oracle: rows decoded to double, products in double.
void matmul_q(DType type, const double* x, const std::byte* w, double* y, int64_t m, int64_t n, int64_t k);

}  // namespace meganeura::cpu
