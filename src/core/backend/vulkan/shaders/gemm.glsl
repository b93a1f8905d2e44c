// The GEMM core shared by the matmul, fused-matmul and convolution kernels: C[batch] =
// op(A)[batch] op(B)[batch] over K, optionally split into K chunks whose partial products a
// second launch (MODE_REDUCE) sums in a fixed order.
//
// The including kernel includes gemm_params.glsl, then defines, before including this file
// (and optionally EXTRA_MODES, a function that runs its own modes, MODE > MODE_REDUCE):
//   struct ARef; ARef a_ref(uint batch, uint row); vec4 a_quad(ARef r, uint k);
//     A_ALONG_K: the quad is op(A)[row][k..k+3], else op(A)[row..row+3][k]
//   struct BRef; BRef b_ref(uint batch, uint col); vec4 b_quad(BRef r, uint k);
//     B_ALONG_N: the quad is op(B)[k][col..col+3], else op(B)[k..k+3][col]
//   void store_c(uint batch, uint row, uint col, vec4 v);  C[row][col..col+3], columns >= N dropped
//   the split workspace: float ws_load(uint i); vec4 ws_load4(uint i4); void ws_store(uint i, float v);
//     void ws_store4(uint i4, vec4 v)  (i4: index of a vec4)
// Quads reaching past M, N or the chunk's end read as zero (the loaders clamp or guard), so
// the core never tests bounds in its inner loop.
//
// Two ways to compute a tile (PATH):
//  - shared memory (GPUs): a BM x BN tile per workgroup, BK-deep slices of A and B staged in
//    double-buffered shared memory (one padding vec4 per row), a TM x TN register block per
//    invocation whose rows and columns are spread so neighbouring invocations read
//    neighbouring vec4s (no bank conflicts), the next slice's global loads issued before the
//    current slice's arithmetic;
//  - direct (CPU-emulated devices, which run a workgroup's invocations on one core in SIMD
//    batches and pay for every load and store, shared memory included, with a loop over the
//    batch's lanes): each invocation reads its own TM rows and TN columns 4 k at a time from
//    the buffers, TM + TN loads for 4 TM TN fused multiply-adds, no staging, no barriers.

// The results' store loop: one call site of a fused epilogue program (not one per result).
#ifdef EPILOGUE
#define STORE_LOOP [[dont_unroll]]
#else
#define STORE_LOOP [[unroll]]
#endif

// Partial products of the splits: [split][batch][M][N], dense.
uint partial_index(uint split, uint batch, uint row, uint col) {
  return pc.w[P_WS_BASE] + ((split * pc.w[P_BATCHES] + batch) * pc.w[P_M] + row) * pc.w[P_N] + col;
}

void write_result(uint split, uint batch, uint row, uint col, vec4 v) {
  const uint m = pc.w[P_M], n = pc.w[P_N];
  if (row >= m || col >= n) return;
  if (pc.w[P_SPLITS] == 1u) {
    store_c(batch, row, col, v);
    return;
  }
  const uint i = partial_index(split, batch, row, col);
  if (VEC_W != 0) {
    ws_store4(i / 4, v);
  } else {
    [[unroll]] for (uint c = 0; c < 4; ++c) {
      if (col + c < n) ws_store(i + c, v[c]);
    }
  }
}

// Direct (CPU-emulated devices): each invocation reads its TM rows of A and TN columns of B
// straight from the buffers, 4 k at a time, into a TM x TN block of accumulators.
void gemm_direct(uint batch, uint split, uint kbeg) {
  const uint tid = gl_LocalInvocationID.x, threads_n = BN / TN;
  const uint row0 = gl_WorkGroupID.y * BM + (tid / threads_n) * TM, col0 = gl_WorkGroupID.x * BN + (tid % threads_n) * TN;
  // A: a quad per row (along K) or per 4 rows (along M); B: a quad per 4 columns (along N) or per column.
  ARef ar[TM];
  BRef br[TN];
  [[unroll]] for (uint r = 0; r < TM; ++r) ar[r] = a_ref(batch, A_ALONG_K != 0 ? row0 + r : row0 + 4 * (r % (TM / 4)));
  [[unroll]] for (uint c = 0; c < TN; ++c) br[c] = b_ref(batch, B_ALONG_N != 0 ? col0 + 4 * (c % (TN / 4)) : col0 + c);
  vec4 acc[TM * (TN / 4)];
  [[unroll]] for (uint i = 0; i < TM * (TN / 4); ++i) acc[i] = vec4(0.0);
  for (uint k = kbeg; k < g_kend; k += 4) {
    vec4 av[TM];  // av[r]: A[row0 + r][k..k + 3]
    if (A_ALONG_K != 0) {
      [[unroll]] for (uint r = 0; r < TM; ++r) av[r] = a_quad(ar[r], k);
    } else {
      [[unroll]] for (uint q = 0; q < TM / 4; ++q) {
        vec4 t[4];  // t[j]: rows 4q..4q+3 at k + j
        [[unroll]] for (uint j = 0; j < 4; ++j) t[j] = a_quad(ar[q], k + j);
        [[unroll]] for (uint i = 0; i < 4; ++i) av[4 * q + i] = vec4(t[0][i], t[1][i], t[2][i], t[3][i]);
      }
    }
    vec4 bv[4 * (TN / 4)];  // bv[j (TN / 4) + q]: B[k + j][col0 + 4q..4q + 3]
    if (B_ALONG_N != 0) {
      [[unroll]] for (uint j = 0; j < 4; ++j) {
        [[unroll]] for (uint q = 0; q < TN / 4; ++q) bv[j * (TN / 4) + q] = b_quad(br[q], k + j);
      }
    } else {
      [[unroll]] for (uint q = 0; q < TN / 4; ++q) {
        vec4 t[4];  // t[i]: column 4q + i at k..k+3
        [[unroll]] for (uint i = 0; i < 4; ++i) t[i] = b_quad(br[4 * q + i], k);
        [[unroll]] for (uint j = 0; j < 4; ++j) bv[j * (TN / 4) + q] = vec4(t[0][j], t[1][j], t[2][j], t[3][j]);
      }
    }
    [[unroll]] for (uint j = 0; j < 4; ++j) {
      [[unroll]] for (uint r = 0; r < TM; ++r) {
        [[unroll]] for (uint q = 0; q < TN / 4; ++q) {
          acc[r * (TN / 4) + q] = fma(vec4(av[r][j]), bv[j * (TN / 4) + q], acc[r * (TN / 4) + q]);
        }
      }
    }
  }
  STORE_LOOP for (uint i = 0; i < TM * (TN / 4); ++i) {
    write_result(split, batch, row0 + i / (TN / 4), col0 + 4 * (i % (TN / 4)), acc[i]);
  }
}

// Shared memory (GPUs).

const uint AS_ROW = BM / 4 + 1, BS_ROW = BN / 4 + 1;  // vec4s per staged k, one of padding
shared vec4 as_[2 * BK * AS_ROW];
shared vec4 bs_[2 * BK * BS_ROW];
const uint THREADS_N = BN / TN, THREADS_M = BM / TM;
const uint LA = (BM * BK / 4 + THREADS_M * THREADS_N - 1) / (THREADS_M * THREADS_N);  // A quads per invocation
const uint LB = (BN * BK / 4 + THREADS_M * THREADS_N - 1) / (THREADS_M * THREADS_N);

// Quad q of a slice: along K, (row q / (BK / 4), k 4 (q % (BK / 4))); along M, (rows 4 (q % (BM / 4)), k q / (BM / 4)).
uint a_quad_row(uint q) { return A_ALONG_K != 0 ? q / (BK / 4) : 4 * (q % (BM / 4)); }
uint a_quad_k(uint q) { return A_ALONG_K != 0 ? 4 * (q % (BK / 4)) : q / (BM / 4); }
uint b_quad_col(uint q) { return B_ALONG_N != 0 ? 4 * (q % (BN / 4)) : q / (BK / 4); }
uint b_quad_k(uint q) { return B_ALONG_N != 0 ? q / (BN / 4) : 4 * (q % (BK / 4)); }

void stage(uint buf, uint q, vec4 v, bool is_a) {
  const uint count = is_a ? BM * BK / 4 : BN * BK / 4;
  if (q >= count) return;
  if (is_a) {
    const uint row = a_quad_row(q), k = a_quad_k(q);
    if (A_ALONG_K != 0) {
      [[unroll]] for (uint c = 0; c < 4; ++c) as_[(buf * BK + k + c) * AS_ROW + row / 4][row % 4] = v[c];
    } else {
      as_[(buf * BK + k) * AS_ROW + row / 4] = v;
    }
  } else {
    const uint col = b_quad_col(q), k = b_quad_k(q);
    if (B_ALONG_N != 0) {
      bs_[(buf * BK + k) * BS_ROW + col / 4] = v;
    } else {
      [[unroll]] for (uint c = 0; c < 4; ++c) bs_[(buf * BK + k + c) * BS_ROW + col / 4][col % 4] = v[c];
    }
  }
}

void gemm_shared(uint batch, uint split, uint kbeg) {
  const uint tid = gl_LocalInvocationID.x, threads = THREADS_M * THREADS_N;
  const uint tx = tid % THREADS_N, ty = tid / THREADS_N;
  const uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
  ARef ar[LA];
  BRef br[LB];
  [[unroll]] for (uint i = 0; i < LA; ++i) ar[i] = a_ref(batch, row0 + a_quad_row(min(tid + i * threads, BM * BK / 4 - 1)));
  [[unroll]] for (uint i = 0; i < LB; ++i) br[i] = b_ref(batch, col0 + b_quad_col(min(tid + i * threads, BN * BK / 4 - 1)));
  vec4 pa[LA], pb[LB];
  [[unroll]] for (uint i = 0; i < LA; ++i) pa[i] = a_quad(ar[i], kbeg + a_quad_k(tid + i * threads));
  [[unroll]] for (uint i = 0; i < LB; ++i) pb[i] = b_quad(br[i], kbeg + b_quad_k(tid + i * threads));
  [[unroll]] for (uint i = 0; i < LA; ++i) stage(0, tid + i * threads, pa[i], true);
  [[unroll]] for (uint i = 0; i < LB; ++i) stage(0, tid + i * threads, pb[i], false);
  barrier();
  vec4 acc[TM * (TN / 4)];
  [[unroll]] for (uint i = 0; i < TM * (TN / 4); ++i) acc[i] = vec4(0.0);
  const uint tiles = (g_kend - kbeg + BK - 1) / BK;
  for (uint t = 0; t < tiles; ++t) {
    const uint cur = t & 1u, next_k = kbeg + (t + 1) * BK;
    const bool more = t + 1 < tiles;
    if (more) {
      [[unroll]] for (uint i = 0; i < LA; ++i) pa[i] = a_quad(ar[i], next_k + a_quad_k(tid + i * threads));
      [[unroll]] for (uint i = 0; i < LB; ++i) pb[i] = b_quad(br[i], next_k + b_quad_k(tid + i * threads));
    }
    [[unroll]] for (uint kk = 0; kk < BK; ++kk) {
      vec4 af[TM / 4], bf[TN / 4];
      [[unroll]] for (uint q = 0; q < TM / 4; ++q) af[q] = as_[(cur * BK + kk) * AS_ROW + q * THREADS_M + ty];
      [[unroll]] for (uint q = 0; q < TN / 4; ++q) bf[q] = bs_[(cur * BK + kk) * BS_ROW + q * THREADS_N + tx];
      [[unroll]] for (uint i = 0; i < TM; ++i) {
        [[unroll]] for (uint q = 0; q < TN / 4; ++q) {
          acc[i * (TN / 4) + q] = fma(vec4(af[i / 4][i % 4]), bf[q], acc[i * (TN / 4) + q]);
        }
      }
    }
    if (more) {
      [[unroll]] for (uint i = 0; i < LA; ++i) stage(cur ^ 1u, tid + i * threads, pa[i], true);
      [[unroll]] for (uint i = 0; i < LB; ++i) stage(cur ^ 1u, tid + i * threads, pb[i], false);
    }
    barrier();
  }
  // Invocation (ty, tx) holds rows 4 (q THREADS_M + ty) + c and columns 4 (q THREADS_N + tx) + 0..3.
  STORE_LOOP for (uint e = 0; e < TM * (TN / 4); ++e) {
    const uint i = e / (TN / 4), q = e % (TN / 4);
    const uint row = row0 + 4 * ((i / 4) * THREADS_M + ty) + i % 4, col = col0 + 4 * (q * THREADS_N + tx);
    write_result(split, batch, row, col, acc[e]);
  }
}

// MODE_REDUCE: one invocation per 4 outputs of a row; the splits' partials summed in order.
void reduce_splits() {
  const uint m = pc.w[P_M], n = pc.w[P_N], quads = (n + 3) / 4;
  const uint e = flat_index();
  if (e >= pc.w[P_BATCHES] * m * quads) return;
  const uint col = 4 * (e % quads), row = (e / quads) % m, batch = e / (quads * m);
  vec4 s = vec4(0.0);
  for (uint split = 0; split < pc.w[P_SPLITS]; ++split) {
    const uint i = partial_index(split, batch, row, col);
    if (VEC_W != 0) {
      s += ws_load4(i / 4);
    } else {
      [[unroll]] for (uint c = 0; c < 4; ++c) s[c] += col + c < n ? ws_load(i + c) : 0.0;
    }
  }
  store_c(batch, row, col, s);
}

void main() {
  if (MODE == MODE_REDUCE) {
    reduce_splits();
    return;
  }
#ifdef EXTRA_MODES
  if (MODE > MODE_REDUCE) {  // the kernel's own modes
    EXTRA_MODES();
    return;
  }
#endif
  const uint splits = pc.w[P_SPLITS];
  const uint batch = gl_WorkGroupID.z / splits, split = gl_WorkGroupID.z % splits;
  const uint kbeg = split * pc.w[P_KCHUNK];
  g_kend = min(pc.w[P_K], kbeg + pc.w[P_KCHUNK]);
  if (PATH == PATH_DIRECT)
    gemm_direct(batch, split, kbeg);
  else
    gemm_shared(batch, split, kbeg);
}
