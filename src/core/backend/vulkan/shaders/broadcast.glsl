// The schedule's collapsed broadcast layout (schedule.h, ElementwiseLayout): word RANK, the
// extents from word EXTENTS and each input's mask of spanned dimensions from word MASKS.
// Included after the including kernel declares `pc.w` and those word indices.
// The element of input k at flat index i of the (collapsed) domain: its strides skip the
// dimensions it is broadcast over.
uint offset_of(uint k, uint i) {
  uint mask = (pc.w[MASKS + k / 4] >> ((k % 4) * 8)) & 0xffu;
  uint rank = pc.w[RANK], o = 0, s = 1;
  if ((mask & ((1u << rank) - 1u)) == (1u << rank) - 1u) return i;  // spans the whole domain
  for (int d = int(rank) - 1; d >= 0; --d) {
    uint e = pc.w[EXTENTS + uint(d)];
    uint c = i % e;
    i /= e;
    if ((mask >> uint(d) & 1u) != 0u) {
      o += c * s;
      s *= e;
    }
  }
  return o;
}
