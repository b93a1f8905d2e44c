// The block-format weight at binding 1 and its readers, for byte offsets o (even where a half
// or four bytes start: blocks are 34 or 18 bytes). BYTES: through 8-bit storage, a byte per
// load; otherwise from 32-bit words, shifted out.
#ifdef BYTES
#extension GL_EXT_shader_8bit_storage : require
layout(std430, binding = 1) readonly buffer W { uint8_t wb[]; };
uint byte_at(uint o) { return uint(wb[o]); }
float half_at(uint o) { return unpackHalf2x16(uint(wb[o]) | (uint(wb[o + 1]) << 8)).x; }
uint bytes4(uint o) {
  return uint(wb[o]) | (uint(wb[o + 1]) << 8) | (uint(wb[o + 2]) << 16) | (uint(wb[o + 3]) << 24);
}
#else
layout(std430, binding = 1) readonly buffer W { uint wq[]; };
uint byte_at(uint o) { return (wq[o >> 2] >> ((o & 3u) * 8u)) & 255u; }
float half_at(uint o) { return unpackHalf2x16((wq[o >> 2] >> ((o & 2u) * 8u)) & 0xffffu).x; }
uint bytes4(uint o) {
  const uint w0 = wq[o >> 2];
  if ((o & 2u) == 0u) return w0;
  return (w0 >> 16) | (wq[(o >> 2) + 1u] << 16);
}
#endif
