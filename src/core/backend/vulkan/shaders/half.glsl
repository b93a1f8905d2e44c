// 16-bit operands: values stored two per 32-bit word, element 2j in the low half of word j,
// as f16 (format 1) or bf16 (format 2). Plain integer words, so any Vulkan device reads and
// writes them (no 16-bit storage feature).
const uint HALF_F32 = 0, HALF_F16 = 1, HALF_BF16 = 2;

// Element i of a tensor whose word i / 2 is `word`.
float half_value(uint word, uint i, uint format) {
  const uint h = (i & 1u) != 0 ? word >> 16 : word & 0xffffu;
  return format == HALF_F16 ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16);
}
// Elements 4q to 4q + 3 from words 2q and 2q + 1.
vec4 half_quad(uvec2 w, uint format) {
  if (format == HALF_F16) return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
  return vec4(uintBitsToFloat(w.x << 16), uintBitsToFloat(w.x & 0xffff0000u), uintBitsToFloat(w.y << 16),
              uintBitsToFloat(w.y & 0xffff0000u));
}

// The f16 bits of x rounded to nearest, ties to even (round_f16's rounding), in integer
// arithmetic: exact whatever the device's conversion rounding and denormal modes.
uint f16_bits(float x) {
  const uint u = floatBitsToUint(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;                // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;               // 65520 and above round to infinity
  if (a < 0x38800000u) {                                     // below 2^-14: subnormal (or zero)
    return sign | uint(roundEven(uintBitsToFloat(a) * 16777216.0));  // units of 2^-24, exact scaling
  }
  const uint r = a - 0x38000000u;  // exponent rebiased from 127 to 15
  return sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
}
// The bf16 bits of x rounded to nearest, ties to even (round_bf16's rounding); NaN stays NaN.
uint bf16_bits(float x) {
  const uint u = floatBitsToUint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
