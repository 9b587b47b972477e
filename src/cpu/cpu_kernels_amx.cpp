// AMX-BF16 kernels for the 16-bit products (bf16, fp8 e4m3 as exact bf16, fp16 as hi + lo).
// Compiled with -mamx-tile -mamx-bf16 and the AVX-512 flags (CMake: *_amx.cpp); only called
// after amx_usable() (cpu_isa.cpp: CPUID, XCR0 and the Linux tile-data permission).
//
// Everything else (fp32 products, softmax, packers, decode rows) is the AVX-512 table's. The
// panels are the ones cpu_kernels.h describes; every tile is 16 rows x 64 bytes:
//   S^T = K Q^T  (2 x 2 C tiles: 32 keys x 32 queries)
//     tmm0..3  C  [16 keys][16 queries] fp32        st + (n0 + 16a) mp + m0 + 16b
//     tmm4..5  A  [16 keys][32 dims] bf16           kb, row stride dqk_p
//     tmm6..7  B  [16 dim pairs][16 queries][2]     qv, row stride mp pairs
//   O^T = V^T P^T  (2 x 2 C tiles: 32 dims x 32 queries, loaded from and stored to ot once per
//   key tile, after the alpha rescale)
//     tmm0..3  C  [16 dims][16 queries] fp32        ot + (e0 + 16a) mp + m0 + 16b
//     tmm4..5  A  [16 dims][32 keys] bf16           vt, row stride nk_p
//     tmm6..7  B  [16 key pairs][16 queries][2]     pp, row stride m pairs
// 2 x 2 blocking: 4 tile multiplies per 4 tile loads, all 8 tile registers in use.
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_* idiom.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstring>

#include "cpu/cpu_kernels.h"

namespace fa4::core::cpu {
namespace {

inline int64_t rup(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
// (A plane, B plane) of the products of fp16 values split as hi + lo bf16: hi*hi, hi*lo, lo*hi,
// lo*lo. S = Q K^T takes all four, so fp16 scores are exact products summed in fp32 (lo*lo is
// 2^-16 of a product: dropped, scores of ~200 -- outlier rows -- were off by ~1e-3 and so was
// their lse, beyond its fp32 tolerance); P V drops lo*lo (below the rounding of P itself).
constexpr int kProducts[4][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
inline int num_products(int terms) { return terms == 2 ? 3 : 1; }
inline int num_products_exact(int terms) { return terms == 2 ? 4 : 1; }

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int i = 0; i < 8; ++i) {
      colsb[i] = 64;
      rows[i] = 16;
    }
  }
};
static_assert(sizeof(TileConfig) == 64);

// The tile configuration is per thread and anything else on the thread (another library's
// AMX code between two calls) may change it, so it is loaded at the start of every work unit.
void amx_begin() {
  static const TileConfig cfg;
  _tile_loadconfig(&cfg);
}
void amx_end() { _tile_release(); }

// LowpKernels::prefetch_next: the lines the next qk / pv call of this thread prefetches into L2,
// a few after each k-step (Prefetcher), so they arrive while the tile unit works on operands
// already in L2 instead of in one burst that would hold the L1 miss buffers the tile loads need.
struct PrefetchStream {
  const char* p = nullptr;
  int64_t lines = 0;
};
thread_local PrefetchStream t_prefetch;
void amx_prefetch_next(const void* p, int64_t bytes) { t_prefetch = {static_cast<const char*>(p), (bytes + 63) / 64}; }

// Takes this thread's stream for a call of `steps` k-steps: per_step lines after each.
struct Prefetcher {
  const char* p;
  const char* end;
  int64_t per_step;
  explicit Prefetcher(int64_t steps) {
    PrefetchStream& s = t_prefetch;
    p = s.p;
    end = s.p + s.lines * 64;
    per_step = steps > 0 ? (s.lines + steps - 1) / steps : 0;
    s = {};
  }
  inline void step() {
    for (int64_t i = 0; i < per_step && p < end; ++i, p += 64) _mm_prefetch(p, _MM_HINT_T1);
  }
};

// Running max / min over keys of a 32-query column block of S^T, updated from the block of 32
// (or 16) keys a qk_block just stored (in L1 then): the softmax step's first pass, which read
// the 192 KB S^T back from L2, moved here where part of it overlaps the tile unit's work. One
// 96 x 512 tile, one thread (bench/cpu_tile_bench.cpp): qk +1-2 us, softmax -2.9 us, the tile
// 27.5 -> 26.8 us at D 128 (D 64 20.4 -> 18.4, D 256 46.1 -> 43.7).
struct ColumnMax {
  __m512 mx[2], mn[2];
  void reset() {
    mx[0] = mx[1] = _mm512_set1_ps(-__builtin_inff());
    mn[0] = mn[1] = _mm512_set1_ps(__builtin_inff());
  }
  template <bool M2>
  void update(const float* st, int64_t mp, int rows) {
    __m512 a0 = mx[0], a1 = mx[1], b0 = mn[0], b1 = mn[1];
    __m512 c0 = a0, c1 = a1, d0 = b0, d1 = b1;  // two chains per vector: max_ps has 4 cycles of latency
    for (int k = 0; k < rows; k += 2) {
      const __m512 x0 = _mm512_loadu_ps(st + k * mp), y0 = _mm512_loadu_ps(st + (k + 1) * mp);
      a0 = _mm512_max_ps(a0, x0);
      b0 = _mm512_min_ps(b0, x0);
      c0 = _mm512_max_ps(c0, y0);
      d0 = _mm512_min_ps(d0, y0);
      if constexpr (M2) {
        const __m512 x1 = _mm512_loadu_ps(st + k * mp + 16), y1 = _mm512_loadu_ps(st + (k + 1) * mp + 16);
        a1 = _mm512_max_ps(a1, x1);
        b1 = _mm512_min_ps(b1, x1);
        c1 = _mm512_max_ps(c1, y1);
        d1 = _mm512_min_ps(d1, y1);
      }
    }
    mx[0] = _mm512_max_ps(a0, c0);
    mn[0] = _mm512_min_ps(b0, d0);
    if constexpr (M2) {
      mx[1] = _mm512_max_ps(a1, c1);
      mn[1] = _mm512_min_ps(b1, d1);
    }
  }
  void store(float* mx_out, float* mn_out, bool m2) const {
    _mm512_storeu_ps(mx_out, mx[0]);
    _mm512_storeu_ps(mn_out, mn[0]);
    if (m2) {
      _mm512_storeu_ps(mx_out + 16, mx[1]);
      _mm512_storeu_ps(mn_out + 16, mn[1]);
    }
  }
};

template <bool N2, bool M2>
inline void qk_block(const uint16_t* qv, int64_t mp, int64_t dqk_p, int64_t qplane, const uint16_t* kb, int64_t kplane,
                     int terms, float* st, Prefetcher& pf) {
  _tile_zero(0);
  if constexpr (M2) _tile_zero(1);
  if constexpr (N2) _tile_zero(2);
  if constexpr (N2 && M2) _tile_zero(3);
  const int64_t ka = dqk_p * 2, qb = mp * 4;  // byte strides
  for (int pr = 0; pr < num_products_exact(terms); ++pr) {
    const uint16_t* k = kb + kProducts[pr][0] * kplane;
    const uint16_t* q = qv + kProducts[pr][1] * qplane;
    for (int64_t d0 = 0; d0 < dqk_p; d0 += 32) {
      _tile_loadd(4, k + d0, ka);
      if constexpr (N2) _tile_loadd(5, k + 16 * dqk_p + d0, ka);
      _tile_loadd(6, q + d0 / 2 * mp * 2, qb);
      if constexpr (M2) _tile_loadd(7, q + d0 / 2 * mp * 2 + 32, qb);
      _tile_dpbf16ps(0, 4, 6);
      if constexpr (M2) _tile_dpbf16ps(1, 4, 7);
      if constexpr (N2) _tile_dpbf16ps(2, 5, 6);
      if constexpr (N2 && M2) _tile_dpbf16ps(3, 5, 7);
      pf.step();
    }
  }
  _tile_stored(0, st, qb);
  if constexpr (M2) _tile_stored(1, st + 16, qb);
  if constexpr (N2) _tile_stored(2, st + 16 * mp, qb);
  if constexpr (N2 && M2) _tile_stored(3, st + 16 * mp + 16, qb);
}

// Stores the raw products (LowpKernels::raw_scores): the softmax step applies the fp32 scale and
// the extreme-score check while it reads S^T for the row max anyway (a separate load / multiply /
// store / compare pass here was ~1/3 of this function).
// LowpKernels::qk_max; raw_max / raw_min may also both be nullptr (qk_amx: the products alone).
void qk_max_amx(const uint16_t* qv, int64_t mp, int64_t m, int64_t dqk, const uint16_t* kb, int64_t ld, int64_t n,
                int terms, float* st, float* raw_max, float* raw_min) {
  const int64_t dqk_p = rup(dqk, 32), n16 = rup(n, 16), qplane = dqk_p * mp, kplane = ld * dqk_p;
  ColumnMax cm;
  Prefetcher pf((m + 31) / 32 * ((n16 + 31) / 32) * (dqk_p / 32) * num_products_exact(terms));
  for (int64_t m0 = 0; m0 < m; m0 += 32) {
    const bool m2 = m - m0 >= 32;
    cm.reset();
    for (int64_t n0 = 0; n0 < n16; n0 += 32) {
      const bool n2 = n16 - n0 >= 32;
      const uint16_t* q = qv + m0 * 2;
      const uint16_t* k = kb + n0 * dqk_p;
      float* s = st + n0 * mp + m0;
      if (n2 && m2) qk_block<true, true>(q, mp, dqk_p, qplane, k, kplane, terms, s, pf);
      else if (n2) qk_block<true, false>(q, mp, dqk_p, qplane, k, kplane, terms, s, pf);
      else if (m2) qk_block<false, true>(q, mp, dqk_p, qplane, k, kplane, terms, s, pf);
      else qk_block<false, false>(q, mp, dqk_p, qplane, k, kplane, terms, s, pf);
      // (Taking each block's max one block later, after the next block's tile work was issued,
      // measured the same: the loads of a just-stored block do not hold the tile unit up.)
      if (raw_max) {
        if (m2) cm.update<true>(s, mp, n2 ? 32 : 16);
        else cm.update<false>(s, mp, n2 ? 32 : 16);
      }
    }
    if (raw_max) cm.store(raw_max + m0, raw_min + m0, m2);
  }
}

bool qk_amx(const uint16_t* qv, int64_t mp, int64_t m, int64_t dqk, const uint16_t* kb, int64_t ld, int64_t n,
            int terms, float /*scale*/, float* st) {
  qk_max_amx(qv, mp, m, dqk, kb, ld, n, terms, st, nullptr, nullptr);
  return false;
}

// fresh: the block's O^T is alpha O^T = 0 (alpha = 0 for every row: their first key tile), so
// the accumulators start from zero instead of a load.
template <bool E2, bool M2>
inline void pv_block(const uint16_t* pp, int64_t m, int64_t nk_p, int64_t pplane, const uint16_t* vt, int64_t ld,
                     int64_t vplane, int terms, int64_t mp, bool fresh, float* ot, Prefetcher& pf) {
  const int64_t ob = mp * 4, va = ld * 2, pb = m * 4;  // byte strides
  if (fresh) {
    _tile_zero(0);
    if constexpr (M2) _tile_zero(1);
    if constexpr (E2) _tile_zero(2);
    if constexpr (E2 && M2) _tile_zero(3);
  } else {
    _tile_loadd(0, ot, ob);
    if constexpr (M2) _tile_loadd(1, ot + 16, ob);
    if constexpr (E2) _tile_loadd(2, ot + 16 * mp, ob);
    if constexpr (E2 && M2) _tile_loadd(3, ot + 16 * mp + 16, ob);
  }
  for (int pr = 0; pr < num_products(terms); ++pr) {
    const uint16_t* a = vt + kProducts[pr][0] * vplane;
    const uint16_t* b = pp + kProducts[pr][1] * pplane;
    for (int64_t k0 = 0; k0 < nk_p; k0 += 32) {
      _tile_loadd(4, a + k0, va);
      if constexpr (E2) _tile_loadd(5, a + 16 * ld + k0, va);
      _tile_loadd(6, b + k0 / 2 * m * 2, pb);
      if constexpr (M2) _tile_loadd(7, b + k0 / 2 * m * 2 + 32, pb);
      _tile_dpbf16ps(0, 4, 6);
      if constexpr (M2) _tile_dpbf16ps(1, 4, 7);
      if constexpr (E2) _tile_dpbf16ps(2, 5, 6);
      if constexpr (E2 && M2) _tile_dpbf16ps(3, 5, 7);
      pf.step();
    }
  }
  _tile_stored(0, ot, ob);
  if constexpr (M2) _tile_stored(1, ot + 16, ob);
  if constexpr (E2) _tile_stored(2, ot + 16 * mp, ob);
  if constexpr (E2 && M2) _tile_stored(3, ot + 16 * mp + 16, ob);
}

void pv_amx(const float* st, int64_t mp, int64_t m, int64_t n, const uint16_t* vt, int64_t ld, int64_t dv, int terms,
            const float* alpha, uint16_t* pp, float* ot) {
  const int64_t nk_p = rup(n, 32), dv_p = rup(dv, 16), pplane = nk_p * m, vplane = dv_p * ld;
  if (st) pack_p_avx512(st, mp, m, n, terms, pp);
  Prefetcher pf((m + 31) / 32 * ((dv_p + 31) / 32) * (nk_p / 32) * num_products(terms));
  for (int64_t m0 = 0; m0 < m; m0 += 32) {
    const bool m2 = m - m0 >= 32;
    // A block whose rows all have alpha = 0 (the unit's first key tile: m_old = -inf) needs
    // neither the O^T rescale nor the accumulator loads: ~1.2 us of a 96 x 512 D 128 tile's
    // ~27 (the rescale reads and writes 48 KB), all of it at S <= 512 (one key tile per row).
    const __mmask16 nz = _mm512_cmp_ps_mask(_mm512_loadu_ps(alpha + m0), _mm512_setzero_ps(), _CMP_NEQ_UQ);
    const bool fresh = nz == 0 && (!m2 || _mm512_cmp_ps_mask(_mm512_loadu_ps(alpha + m0 + 16), _mm512_setzero_ps(),
                                                             _CMP_NEQ_UQ) == 0);
    if (!fresh) rescale_ot_avx512(ot + m0, mp, m2 ? 32 : 16, dv, alpha + m0);
    for (int64_t e0 = 0; e0 < dv_p; e0 += 32) {
      const bool e2 = dv_p - e0 >= 32;
      const uint16_t* b = pp + m0 * 2;
      const uint16_t* a = vt + e0 * ld;
      float* o = ot + e0 * mp + m0;
      if (e2 && m2) pv_block<true, true>(b, m, nk_p, pplane, a, ld, vplane, terms, mp, fresh, o, pf);
      else if (e2) pv_block<true, false>(b, m, nk_p, pplane, a, ld, vplane, terms, mp, fresh, o, pf);
      else if (m2) pv_block<false, true>(b, m, nk_p, pplane, a, ld, vplane, terms, mp, fresh, o, pf);
      else pv_block<false, false>(b, m, nk_p, pplane, a, ld, vplane, terms, mp, fresh, o, pf);
    }
  }
}

}  // namespace

const Kernels& amx_kernels() {
  // 96-row x 512-key tiles. A tile store costs about as much as a tile multiply here (S^T: one
  // per four multiplies at D = 128; O^T: a load and a store per C tile and key tile), so long key
  // tiles pay for the O^T round trips over 16 k-steps instead of 4; S^T (192 KB) and P^T stay in
  // the 2 MB L2, and the diagonal tiles of causal masks compute only the keys their rows see.
  // Same-run A/B (2 threads, bf16 D = 128, GFLOP/s, against 192 x 128): S = 2048 832 vs 734,
  // causal 618 vs 589, S = 512 420 vs 375 (64 x 512 and 128 x 512 within a few %, 96 x 256 a
  // little slower).
  static const LowpKernels lowp = [] {
    LowpKernels k = avx512_lowp();
    k.key_tile = 512;
    // Kv heads with more than 1 MB of panels (D 256 from S 1024 on, D 128 beyond S 2048): the
    // panels come from L3 for every query tile (L2 holds ~1.5 MB of them beside the tile's
    // S^T / P^T / O^T). 256-key tiles, and each tile's V and the next tile's K prefetched during
    // the products. One thread, bf16 D 256 S 2048 (fa4 run, BSHD, taskset -c 0, GFLOP/s): 512
    // keys 641-659, + prefetch 717-727, 256 keys 678-712, 256 keys + prefetch 803-844 (128 keys
    // 756-789, 384 keys 679-722, with prefetch). Two threads: D 256 S 2048 1.31-1.34 TFLOP/s ->
    // 1.48-1.49, D 128 S 4096 1.42-1.43 -> 1.55-1.60; at 1 MB (D 128 S 2048, D 256 S 1024)
    // neither helps (0.97-1.02x), and prefetch alone at 512 keys gains less (1.38-1.42).
    k.big_panel_bytes = int64_t{1} << 20;
    k.big_key_tile = 256;
    k.tile_rows = 96;
    k.qk = qk_amx;
    k.qk_max = qk_max_amx;
    k.pv = pv_amx;
    k.begin = amx_begin;
    k.end = amx_end;
    k.prefetch_next = amx_prefetch_next;
    k.raw_scores = true;
    return k;
  }();
  static const Kernels k = [] {
    Kernels t = avx512_kernels(true);
    t.name = "amx";
    t.lowp_bf16 = &lowp;
    t.lowp_f16 = &lowp;
    return t;
  }();
  return k;
}

}  // namespace fa4::core::cpu
