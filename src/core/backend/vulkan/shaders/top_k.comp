#version 450
// top_k (ops/top_k.cpp): one workgroup per row finds the row's k largest entries and writes
// them largest first ([values..., indices as floats...], 2k per row), as the CPU kernel does:
// NaN above every number, equal values (-0 and +0 among them) by the lower index.
//
// Each value maps to a 32-bit key that orders as the values do. A radix select over the keys,
// eight bits per pass from the top, finds the key T of the k-th largest entry and how many
// entries equal to T it takes (`want`): each pass counts the entries still matching the
// prefix chosen so far into 256 bins and walks the bins from the top. The entries above T are
// then gathered in any order, those equal to T by index (each invocation counts its own
// contiguous chunk's, and an exclusive prefix over the invocations ranks them), and every
// candidate's place in the output is the number of candidates ordered before it.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 8) buffer Y { float y[]; };

layout(push_constant) uniform P { uint w[32]; } pc;
const uint ROWS = 0, WIDTH = 1, COUNT = 2;  // the schedule's (schedule.h, push::kIndexRows...)
const uint MAX_K = 1024, MAX_GROUP = 256;

shared uint hist[256];
shared uint cand_key[MAX_K];
shared uint cand_idx[MAX_K];
shared uint chunk_ties[MAX_GROUP];
shared uint s_prefix, s_mask, s_want, s_filled;

uint key_of(float v) {
  if (isnan(v)) return 0xffffffffu;
  if (v == 0.0) return 0x80000000u;  // -0 and +0 are one value
  uint b = floatBitsToUint(v);
  return (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u;
}

void main() {
  const uint r = flat_group(), n = pc.w[WIDTH], k = pc.w[COUNT];
  if (r >= pc.w[ROWS]) return;  // uniform over the workgroup
  const uint lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x, base = r * n;
  if (lid == 0u) {
    s_prefix = 0u;
    s_mask = 0u;
    s_want = k;
    s_filled = 0u;
  }
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (uint b = lid; b < 256u; b += wg) hist[b] = 0u;
    barrier();
    const uint prefix = s_prefix, mask = s_mask;
    for (uint j = lid; j < n; j += wg) {
      const uint key = key_of(x[base + j]);
      if ((key & mask) == prefix) atomicAdd(hist[(key >> uint(shift)) & 255u], 1u);
    }
    barrier();
    if (lid == 0u) {
      uint above = 0u, b = 255u;  // at least `want` entries match the prefix: a bin holds the k-th
      while (b > 0u && above + hist[b] < s_want) above += hist[b--];
      s_want -= above;
      s_prefix = prefix | (b << uint(shift));
      s_mask = mask | (255u << uint(shift));
    }
    barrier();
  }
  const uint t = s_prefix, want = s_want;  // take `want` of the entries whose key is t
  // Entries above t: slots [0, k - want), in any order.
  for (uint j = lid; j < n; j += wg) {
    if (key_of(x[base + j]) > t) {
      const uint slot = atomicAdd(s_filled, 1u);
      cand_key[slot] = key_of(x[base + j]);
      cand_idx[slot] = j;
    }
  }
  // Entries equal to t, the first `want` by index: slots [k - want, k).
  const uint chunk = (n + wg - 1u) / wg, lo = min(n, lid * chunk), hi = min(n, lo + chunk);
  uint ties = 0u;
  for (uint j = lo; j < hi; ++j) ties += key_of(x[base + j]) == t ? 1u : 0u;
  chunk_ties[lid] = ties;
  barrier();
  if (lid == 0u) {
    uint sum = 0u;
    for (uint i = 0u; i < wg; ++i) {
      const uint c = chunk_ties[i];
      chunk_ties[i] = sum;
      sum += c;
    }
  }
  barrier();
  uint rank = chunk_ties[lid];
  for (uint j = lo; j < hi && rank < want; ++j) {
    if (key_of(x[base + j]) == t) {
      cand_key[k - want + rank] = t;
      cand_idx[k - want + rank] = j;
      ++rank;
    }
  }
  barrier();
  // Each candidate's place: the candidates with a larger key, or an equal key and a lower index.
  for (uint i = lid; i < k; i += wg) {
    const uint ki = cand_key[i], ii = cand_idx[i];
    uint place = 0u;
    for (uint j = 0u; j < k; ++j) place += cand_key[j] > ki || (cand_key[j] == ki && cand_idx[j] < ii) ? 1u : 0u;
    y[r * 2u * k + place] = x[base + ii];
    y[r * 2u * k + k + place] = float(ii);
  }
}
