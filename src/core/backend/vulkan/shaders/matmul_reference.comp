#version 450
// The first GEMM kernel, kept as the baseline the benchmarks and tests compare the GEMM kernels
// against (VulkanKernels::naive): batched C = op(A) op(B), a workgroup per BM x BN block of C,
// BK-deep slices of A and B staged in shared memory by scalar loads, a 4 x 4 register block
// per invocation. Its K loop runs K / BK times per invocation.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint BK = 16;
const uint TM = 4;  // register block; literal so the accumulator stays in registers
const uint TN = 4;

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };

layout(push_constant) uniform P {
  uint m, n, k, trans_a, trans_b, lda, ldb;
  uint batch_a, batch_b, batch_c;  // element strides between batches (0: shared)
} pc;

shared float as_[BK * BM];
shared float bs_[BK * BN];

float load_a(uint base, uint row, uint col) {  // op(A)[row, col]
  if (row >= pc.m || col >= pc.k) return 0.0;
  return pc.trans_a != 0 ? a[base + col * pc.lda + row] : a[base + row * pc.lda + col];
}
float load_b(uint base, uint row, uint col) {  // op(B)[row, col]
  if (row >= pc.k || col >= pc.n) return 0.0;
  return pc.trans_b != 0 ? b[base + col * pc.ldb + row] : b[base + row * pc.ldb + col];
}

void main() {
  const uint threads = gl_WorkGroupSize.x;
  const uint tid = gl_LocalInvocationID.x;
  const uint cols = BN / TN;  // invocations along n
  const uint ty = tid / cols, tx = tid % cols;
  const uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
  const uint batch = gl_WorkGroupID.z;
  const uint abase = batch * pc.batch_a, bbase = batch * pc.batch_b;
  float acc[TM * TN];
  for (uint i = 0; i < TM * TN; ++i) acc[i] = 0.0;
  for (uint k0 = 0; k0 < pc.k; k0 += BK) {
    // Cooperative loads; consecutive invocations take consecutive columns of the source.
    for (uint e = tid; e < BK * BM; e += threads) {
      uint kk, mm;
      if (pc.trans_a != 0) { mm = e % BM; kk = e / BM; } else { kk = e % BK; mm = e / BK; }
      as_[kk * BM + mm] = load_a(abase, row0 + mm, k0 + kk);
    }
    for (uint e = tid; e < BK * BN; e += threads) {
      uint kk, nn;
      if (pc.trans_b != 0) { kk = e % BK; nn = e / BK; } else { nn = e % BN; kk = e / BN; }
      bs_[kk * BN + nn] = load_b(bbase, k0 + kk, col0 + nn);
    }
    barrier();
    for (uint kk = 0; kk < BK; ++kk) {
      float ra[TM], rb[TN];
      for (uint i = 0; i < TM; ++i) ra[i] = as_[kk * BM + ty * TM + i];
      for (uint j = 0; j < TN; ++j) rb[j] = bs_[kk * BN + tx * TN + j];
      for (uint i = 0; i < TM; ++i)
        for (uint j = 0; j < TN; ++j) acc[i * TN + j] = fma(ra[i], rb[j], acc[i * TN + j]);
    }
    barrier();
  }
  const uint cbase = batch * pc.batch_c;
  for (uint i = 0; i < TM; ++i) {
    uint row = row0 + ty * TM + i;
    if (row >= pc.m) break;
    for (uint j = 0; j < TN; ++j) {
      uint col = col0 + tx * TN + j;
      if (col < pc.n) c[cbase + row * pc.n + col] = acc[i * TN + j];
    }
  }
}
