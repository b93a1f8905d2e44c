// Attention in query tiles: each tile of kTile query rows computes its scores against all keys
// with one GEMM, a softmax in place, and P V with a second GEMM, so the working set is
// kTile x Sk per thread instead of Sq x Sk per head. The forward saves each row's
// log-sum-exp; the backward recomputes a tile's probabilities from it and accumulates dK and
// dV per key/value head (one task per key/value head, so accumulation needs no locks).
// Every GEMM runs single-threaded on its pool thread (gemm_serial): a threaded BLAS called from
// inside the pool's tasks oversubscribes the cores and spins.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"

namespace meganeura::cpu {
namespace {

constexpr int64_t kTile = 64;

struct Dims {
  int64_t b, hq, hkv, sq, sk, d, dv, group, offset;  // offset: causal diagonal shift (Sk - Sq)
  explicit Dims(const PushConstants& p)              // push::kAttention: b, hq, hkv, sq, sk, d, dv
      : b(word(p, 0)),
        hq(word(p, 1)),
        hkv(word(p, 2)),
        sq(word(p, 3)),
        sk(word(p, 4)),
        d(word(p, 5)),
        dv(word(p, 6)),
        group(hq / hkv),
        offset(sk - sq) {}
  static int64_t word(const PushConstants& p, size_t i) { return p.get(push::kAttention + i); }
};

// Scores of query rows [r0, r0 + rows) of one head against all keys, scaled and masked.
template <class T>
void scores(const Dims& m, const AttentionAttrs& a, const T* q, const T* k, int64_t r0, int64_t rows, T* s) {
  gemm_serial(false, true, rows, m.sk, m.d, T(a.scale), q + r0 * m.d, m.d, k, m.d, T(0), s, m.sk);
  if (!a.causal) return;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t last = r0 + i + m.offset;  // keys beyond it are in the future
    for (int64_t j = std::max<int64_t>(last + 1, 0); j < m.sk; ++j)
      s[i * m.sk + j] = -std::numeric_limits<T>::infinity();
  }
}

template <class T>
void forward(const Dims& m, const AttentionAttrs& a, const T* q, const T* k, const T* v, T* out, T* lse) {
  const int64_t tiles = (m.sq + kTile - 1) / kTile, tasks = m.b * m.hq * tiles;
  parallel_for(tasks, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> s(size_t(kTile * m.sk));
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t bh = t / tiles, r0 = (t % tiles) * kTile, rows = std::min(kTile, m.sq - r0);
      const int64_t b = bh / m.hq, h = bh % m.hq, kvh = b * m.hkv + h / m.group;
      const T* qh = q + bh * m.sq * m.d;
      scores(m, a, qh, k + kvh * m.sk * m.d, r0, rows, s.data());
      for (int64_t i = 0; i < rows; ++i) {
        T* row = s.data() + i * m.sk;
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < m.sk; ++j) mx = std::max(mx, row[j]);
        double sum = 0;
        for (int64_t j = 0; j < m.sk; ++j)
          sum += double(row[j] = row[j] == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(row[j] - mx));
        const T inv = T(1 / sum);
        for (int64_t j = 0; j < m.sk; ++j) row[j] *= inv;
        lse[bh * m.sq + r0 + i] = mx + T(std::log(sum));
      }
      gemm_serial(false, false, rows, m.dv, m.sk, T(1), s.data(), m.sk, v + kvh * m.sk * m.dv, m.dv, T(0),
                  out + (bh * m.sq + r0) * m.dv, m.dv);
    }
  });
}

template <class T>
void backward(const Dims& m, const AttentionAttrs& a, const T* q, const T* k, const T* v, const T* out, const T* lse,
              const T* gout, const T* glse, T* dq, T* dk, T* dv) {
  std::fill(dk, dk + m.b * m.hkv * m.sk * m.d, T(0));
  std::fill(dv, dv + m.b * m.hkv * m.sk * m.dv, T(0));
  parallel_for(m.b * m.hkv, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> p(size_t(kTile * m.sk)), dp(size_t(kTile * m.sk));
    for (int64_t kvh = lo; kvh < hi; ++kvh) {
      const int64_t b = kvh / m.hkv, hk = kvh % m.hkv;
      const T* kh = k + kvh * m.sk * m.d;
      const T* vh = v + kvh * m.sk * m.dv;
      T* dkh = dk + kvh * m.sk * m.d;
      T* dvh = dv + kvh * m.sk * m.dv;
      for (int64_t h = hk * m.group; h < (hk + 1) * m.group; ++h) {
        const int64_t bh = b * m.hq + h;
        const T* qh = q + bh * m.sq * m.d;
        for (int64_t r0 = 0; r0 < m.sq; r0 += kTile) {
          const int64_t rows = std::min(kTile, m.sq - r0);
          scores(m, a, qh, kh, r0, rows, p.data());
          const T* go = gout + (bh * m.sq + r0) * m.dv;
          gemm_serial(false, true, rows, m.sk, m.dv, T(1), go, m.dv, vh, m.dv, T(0), dp.data(), m.sk);  // dP = dO V^T
          for (int64_t i = 0; i < rows; ++i) {
            const int64_t r = bh * m.sq + r0 + i;
            double delta = 0;  // sum_j P_ij dP_ij = dO_i . O_i
            for (int64_t c = 0; c < m.dv; ++c) delta += double(go[i * m.dv + c]) * double(out[r * m.dv + c]);
            const T shift = T(delta) - glse[r];
            T* pr = p.data() + i * m.sk;
            T* dpr = dp.data() + i * m.sk;
            for (int64_t j = 0; j < m.sk; ++j) {
              pr[j] = pr[j] == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(pr[j] - lse[r]);
              dpr[j] = pr[j] * (dpr[j] - shift);  // dS
            }
          }
          gemm_serial(true, false, m.sk, m.dv, rows, T(1), p.data(), m.sk, go, m.dv, T(1), dvh, m.dv);  // dV += P^T dO
          gemm_serial(false, false, rows, m.d, m.sk, T(a.scale), dp.data(), m.sk, kh, m.d, T(0),
                      dq + (bh * m.sq + r0) * m.d, m.d);  // dQ = s dS K
          gemm_serial(true, false, m.sk, m.d, rows, T(a.scale), dp.data(), m.sk, qh + r0 * m.d, m.d, T(1), dkh,
                      m.d);  // dK += s dS^T Q
        }
      }
    }
  });
}

}  // namespace

template <class T>
void attention_tiled(const Dispatch& d, const KernelLaunch& l, const std::vector<Arg>& in, const Arg& out) {
  const auto& a = std::get<AttentionAttrs>(d.attrs);
  const Dims m(l.push);
  const T* q = in[0].as<T>();
  const T* k = in[1].as<T>();
  const T* v = in[2].as<T>();
  const int64_t rows = m.b * m.hq * m.sq;
  if (d.op == Op::attention_fused) {
    T* y = out.as<T>();
    forward(m, a, q, k, v, y, y + rows * m.dv);
    return;
  }
  const T* packed = in[3].as<T>();
  const T* g = in[4].as<T>();
  T* dq = out.as<T>();
  T* dk = dq + rows * m.d;
  T* dv = dk + m.b * m.hkv * m.sk * m.d;
  backward(m, a, q, k, v, packed, packed + rows * m.dv, g, g + rows * m.dv, dq, dk, dv);
}

template void attention_tiled<float>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);
template void attention_tiled<double>(const Dispatch&, const KernelLaunch&, const std::vector<Arg>&, const Arg&);

}  // namespace meganeura::cpu
