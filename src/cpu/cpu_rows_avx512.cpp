// AVX-512 row-major decode kernels (Kernels::qk_rows / pv_rows, contract in cpu_kernels.h) for
// bf16, fp16, fp32 and fp8 (e4m3) K / V with dims a multiple of 32; other dims go to the AVX2
// kernels.
//
// Decode reads each K / V element once, so these kernels only have to keep up with memory. The
// AVX2 ones did not on Sapphire Rapids: perf of B = 4, Hq = 32, Hkv = 8, D = 128, kv 16k bf16 at
// 2 threads had qk_rows 55% and pv_rows 32% of the attention samples at ~15-20% of the
// streaming read. What these do instead:
//   - one 512-bit load is 32 bf16 = 16 dwords; bf16 -> fp32 is a bit shift for the even element
//     of each dword (x << 16) and a mask for the odd one (x & 0xffff0000): 2 ops per 32
//     elements where vpmovzxwd + shift take 4, and the 32 values come out as an even and an odd
//     vector. qk pairs them with the queries permuted the same way (done once per call); pv
//     keeps its O accumulators in that even / odd order and permutes them back at the end.
//   - qk: 16 (key, row) dot products in flight (4 keys x 4 rows, or 2 keys x 8 rows), reduced
//     to one vector of 16 sums by a 45-op shuffle tree (~3 ops per score, where one
//     reduce_add per score would be ~8).
//   - pv: 16 accumulators per pass (4 rows x 64 dims, or 8 rows x 32 dims); P broadcast from
//     memory as an FMA operand.
//   - fp16 (vcvtph2ps of 16 halves) and fp32 rows come out in natural order, two vectors per 32
//     elements: q and O need no permutation there (Loader::kEvenOdd). fp8 rows are looked up as
//     bf16 bit patterns (E4m3Rows) and then split as bf16 rows are.
//   - steady software prefetch (rows_prefetch_avx512): the driver hands each call the rows of
//     the (head, tile) 2 steps later; qk issues one K row per 32-dim step of each 4-key block,
//     pv one V row per two keys over its first two passes. Measured on Zen 5 (1 thread, B = 4,
//     Hkv = 8, kv 16k): a burst of the next tile's rows before q.k ran ~12 GB/s (no software
//     prefetch at all: the same), the steady one ~21; perf then shows the prefetches and the V
//     loads waiting on memory (a core's outstanding misses, not the arithmetic, are the limit).
// Products and sums in fp32 as the AVX2 kernels (only the summation order differs).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
// GCC 12 reports the `__Y = __Y` self-initializations inside avx512fintrin.h's _mm512_undefined_*
// (inlined into the shuffles of hsum16 for the fp32 instances) as -Wuninitialized: a false
// positive of the header, not of this file's values.
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cstdint>
#include <algorithm>
#include <utility>

#include "cpu/cpu_kernels.h"

namespace fa4::core::cpu {
namespace {

constexpr int64_t kMaxDim = 512;  // q is permuted into a stack buffer of 8 rows x kMaxDim
const uint16_t* const e4m3_bf16_table = e4m3_bf16_lut();

inline __m512 bf16_even(__m512i x) { return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)); }
inline __m512 bf16_odd(__m512i x) { return _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(-65536))); }

// 32 elements of a K / V row from element c on, as two fp32 vectors: bf16 as (even, odd)
// elements, fp16 / fp32 as (first 16, last 16).
struct Bf16Rows {
  static constexpr bool kEvenOdd = true;
  static void load(const void* row, int64_t c, __m512* a, __m512* b) {
    const __m512i x = _mm512_loadu_si512(static_cast<const uint16_t*>(row) + c);
    *a = bf16_even(x), *b = bf16_odd(x);
  }
};
struct F16Rows {
  static constexpr bool kEvenOdd = false;
  static void load(const void* row, int64_t c, __m512* a, __m512* b) {
    const uint16_t* h = static_cast<const uint16_t*>(row) + c;
    *a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
    *b = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 16)));
  }
};
// OCP e4m3 ("fn": no infinities, S.1111.111 is NaN), 32 bytes -> their 32 bf16 bit patterns
// (exact), in order: a table lookup of the 7 magnitude bits (e4m3_bf16_lut, 128 words in four
// vectors; vpermi2w picks among 64 by the index's low 6 bits, bit 6 chooses the half) and the
// sign bit moved to bit 15. 7 ops per 32 elements, then the bf16 loader's 2 (even / odd): the
// arithmetic conversion (magnitude << 20 into fp32's fields, x 2^120, NaN blend, sign) took 9
// per 16, and with 4 query rows (GQA 32 / 8) per K / V element those ops, not the halved bytes,
// bounded the decode: B = 4, kv 16k, 1 thread ran 20 ms against bf16's 13.5 (docs/perf/cpu.md).
inline __m512i e4m3x32_to_bf16(__m256i bytes) {
  const __m512i* t = reinterpret_cast<const __m512i*>(e4m3_bf16_table);
  const __m512i w = _mm512_cvtepu8_epi16(bytes);
  const __m512i lo = _mm512_permutex2var_epi16(_mm512_load_si512(t), w, _mm512_load_si512(t + 1));
  const __m512i hi = _mm512_permutex2var_epi16(_mm512_load_si512(t + 2), w, _mm512_load_si512(t + 3));
  const __m512i r = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(w, _mm512_set1_epi16(0x40)), lo, hi);
  // r | (w << 8 & 0x8000): ternary-logic truth table 0xf8 is A | (B & C).
  return _mm512_ternarylogic_epi32(r, _mm512_slli_epi16(w, 8), _mm512_set1_epi16(static_cast<int16_t>(0x8000)), 0xf8);
}
struct E4m3Rows {
  static constexpr bool kEvenOdd = true;  // as bf16
  static void load(const void* row, int64_t c, __m512* a, __m512* b) {
    const __m512i x = e4m3x32_to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint8_t*>(row) + c)));
    *a = bf16_even(x), *b = bf16_odd(x);
  }
};
struct F32Rows {
  static constexpr bool kEvenOdd = false;
  static void load(const void* row, int64_t c, __m512* a, __m512* b) {
    const float* f = static_cast<const float*>(row) + c;
    *a = _mm512_loadu_ps(f), *b = _mm512_loadu_ps(f + 16);
  }
};

// Steady software prefetch (rows_prefetch_avx512): the rows the next qk_rows / pv_rows call on
// this thread pulls toward L1 while it computes, a row per key processed.
struct RowPrefetch {
  const void* const* k = nullptr;
  const void* const* v = nullptr;
  int64_t n = 0, k_bytes = 0, v_bytes = 0;
};
thread_local RowPrefetch tl_pf;
inline void prefetch_row(const void* p, int64_t bytes) {
  const char* c = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63});
  for (const char* e = static_cast<const char*>(p) + bytes; c < e; c += 64) _mm_prefetch(c, _MM_HINT_T0);
}

// Lane l of the result is the sum of the 16 lanes of a[l].
inline __m512 hsum16(const __m512* a) {
  __m512 u[4];
  for (int g = 0; g < 4; ++g) {
    const __m512 a0 = a[4 * g], a1 = a[4 * g + 1], a2 = a[4 * g + 2], a3 = a[4 * g + 3];
    // per 128-bit lane: [a0_0+a0_2, a1_0+a1_2, a0_1+a0_3, a1_1+a1_3]
    const __m512 t01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    const __m512 t23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    // per 128-bit lane: [sum a0, sum a1, sum a2, sum a3] of that lane
    u[g] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t01), _mm512_castps_pd(t23))),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t01), _mm512_castps_pd(t23))));
  }
  // Sum the four 128-bit lanes of each u[g] into lane g of the result.
  const __m512 v01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xdd));
  const __m512 v23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xdd));
  return _mm512_add_ps(_mm512_shuffle_f32x4(v01, v23, 0x88), _mm512_shuffle_f32x4(v01, v23, 0xdd));
}

// The 16 accumulators of a key block (acc[kb * RP + r]: key kb, row r; rows R..RP zero sums)
// summed and stored as st[kb * 8 + r] for kb < nk, rows RP..8 as 0.
template <int RP>
inline void store_key_sums(const __m512* acc, int nk, float* st) {
  const __m512 s = hsum16(acc);
  if (RP == 8) {
    if (nk == 2)
      _mm512_storeu_ps(st, s);
    else
      _mm256_storeu_ps(st, _mm512_castps512_ps256(s));
  } else {
    alignas(64) float sv[16];
    _mm512_store_ps(sv, s);
    for (int kb = 0; kb < nk; ++kb)
      for (int r = 0; r < 8; ++r) st[kb * 8 + r] = r < RP ? sv[kb * RP + r] : 0.0f;
  }
}

// The key blocks of a row of nk keys: blk(krows, n, st, pf, npf, pf_bytes) on each block of KB
// keys (the last one shorter), handing the full blocks their share of the thread's pending
// prefetch list (tl_pf) and prefetching what is left of it after them.
template <int KB, class Blk>
inline void over_key_blocks(const void* const* krows, int64_t nk, float* st, Blk&& blk) {
  const void* const* pf = tl_pf.k;
  const int64_t npf = pf ? tl_pf.n : 0, pf_bytes = tl_pf.k_bytes;
  tl_pf.k = nullptr;
  int64_t j = 0;
  for (; j + KB <= nk; j += KB)
    blk(krows + j, KB, st + j * 8, pf ? pf + j : nullptr, static_cast<int>(std::clamp<int64_t>(npf - j, 0, KB)), pf_bytes);
  for (int64_t t = j; t < npf; ++t) prefetch_row(pf[t], pf_bytes);
  if (j < nk) blk(krows + j, static_cast<int>(nk - j), st + j * 8, nullptr, 0, int64_t{0});
}

// KB = 16 / RP keys x RP (>= R) rows of dot products; st[(kb) * 8 + r] for kb < nk (<= KB),
// rows R..8 of st get 0. qp: R rows of d, in the loader's order per 32 dims ([16 even][16 odd]
// for bf16, natural otherwise).
template <class L, int R, int RP>
inline void qk_keys(const float* qp, int64_t d, const void* const* krows, int nk, float* st,
                    const void* const* pf = nullptr, int npf = 0, int64_t pf_bytes = 0) {
  constexpr int KB = 16 / RP;
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  const void* k[KB];
  for (int kb = 0; kb < KB; ++kb) k[kb] = krows[kb < nk ? kb : nk - 1];
  // pf: npf rows to prefetch, spread over the steps of c (one per step while they last; the rest
  // after the last step).
  int ipf = 0;
  for (int64_t c = 0; c < d; c += 32) {
    if (ipf < npf) prefetch_row(pf[ipf++], pf_bytes);
    for (int kb = 0; kb < KB; ++kb) {
      __m512 ke, ko;
      L::load(k[kb], c, &ke, &ko);
      for (int r = 0; r < R; ++r) {
        __m512& a = acc[kb * RP + r];
        a = _mm512_fmadd_ps(ke, _mm512_loadu_ps(qp + r * d + c), a);
        a = _mm512_fmadd_ps(ko, _mm512_loadu_ps(qp + r * d + c + 16), a);
      }
    }
  }
  for (; ipf < npf; ++ipf) prefetch_row(pf[ipf], pf_bytes);
  store_key_sums<RP>(acc, nk, st);
}

template <class L, int R>
void qk_rows_t(const float* q, int64_t d, const void* const* krows, int64_t nk, float* st) {
  constexpr int RP = R <= 4 ? 4 : 8, KB = 16 / RP;
  alignas(64) float qeo[L::kEvenOdd ? 8 * kMaxDim : 1];
  const float* qp = q;  // natural order: q as it is
  if constexpr (L::kEvenOdd) {
    for (int r = 0; r < R; ++r)
      for (int64_t c = 0; c < d; c += 32)
        for (int i = 0; i < 16; ++i) {
          qeo[r * d + c + i] = q[r * d + c + 2 * i];
          qeo[r * d + c + 16 + i] = q[r * d + c + 2 * i + 1];
        }
    qp = qeo;
  }
  over_key_blocks<KB>(krows, nk, st,
                      [&](const void* const* kr, int n, float* sb, const void* const* pf, int npf, int64_t pfb) {
                        qk_keys<L, R, RP>(qp, d, kr, n, sb, pf, npf, pfb);
                      });
}

// O rows [R][dv] natural order <-> the loader's order of each 32 dims (scaled by alpha on load).
template <class L>
inline void load_o(const float* o, float alpha, __m512* e, __m512* od) {
  const __m512 a = _mm512_set1_ps(alpha);
  if constexpr (!L::kEvenOdd) {
    *e = _mm512_mul_ps(a, _mm512_loadu_ps(o));
    *od = _mm512_mul_ps(a, _mm512_loadu_ps(o + 16));
    return;
  }
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 lo = _mm512_loadu_ps(o), hi = _mm512_loadu_ps(o + 16);
  *e = _mm512_mul_ps(a, _mm512_permutex2var_ps(lo, ie, hi));
  *od = _mm512_mul_ps(a, _mm512_permutex2var_ps(lo, io, hi));
}
template <class L>
inline void store_o(float* o, __m512 e, __m512 od) {
  if constexpr (!L::kEvenOdd) {
    _mm512_storeu_ps(o, e);
    _mm512_storeu_ps(o + 16, od);
    return;
  }
  const __m512i il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i ih = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  _mm512_storeu_ps(o, _mm512_permutex2var_ps(e, il, od));
  _mm512_storeu_ps(o + 16, _mm512_permutex2var_ps(e, ih, od));
}

// C chunks of 32 dims starting at c0, R rows: 2 * C * R <= 16 accumulators.
template <class L, int R, int C>
inline void pv_chunks(const float* pt, int64_t nk, const void* const* vrows, int64_t dv, int64_t c0,
                      const float* alpha, float* o, const void* const* pf = nullptr, int64_t npf = 0,
                      int64_t pf_bytes = 0) {
  __m512 e[C][R], od[C][R];
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) load_o<L>(o + r * dv + c0 + 32 * c, alpha[r], &e[c][r], &od[c][r]);
  for (int64_t j = 0; j < nk; ++j) {
    if ((j & 1) == 0 && j / 2 < npf) prefetch_row(pf[j / 2], pf_bytes);
    for (int c = 0; c < C; ++c) {
      __m512 ve, vo;
      L::load(vrows[j], c0 + 32 * c, &ve, &vo);
      for (int r = 0; r < R; ++r) {
        const __m512 p = _mm512_set1_ps(pt[j * 8 + r]);
        e[c][r] = _mm512_fmadd_ps(p, ve, e[c][r]);
        od[c][r] = _mm512_fmadd_ps(p, vo, od[c][r]);
      }
    }
  }
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) store_o<L>(o + r * dv + c0 + 32 * c, e[c][r], od[c][r]);
}

template <class L, int R>
void pv_rows_t(const float* pt, int64_t nk, const void* const* vrows, int64_t dv, const float* alpha, float* o) {
  constexpr int C = R <= 2 ? 4 : R <= 4 ? 2 : 1;
  const void* const* pf = tl_pf.v;
  int64_t npf = pf ? tl_pf.n : 0;
  const int64_t pf_bytes = tl_pf.v_bytes;
  tl_pf.v = nullptr;
  // The prefetch list spread over the passes over dv: half of the keys' rows in each of the
  // first two (one row per two keys), so that the misses in flight stay steady.
  const int64_t passes = dv / (32 * C) + dv % (32 * C) / 32;
  int64_t c0 = 0, done = 0;
  auto share = [&](int64_t pass) {  // [done, end) of pf for this pass
    const int64_t end = passes <= 1 || pass >= 1 ? npf : std::min(npf, (npf + 1) / 2);
    const int64_t from = done;
    done = end;
    return std::pair<const void* const*, int64_t>{pf ? pf + from : nullptr, end - from};
  };
  int64_t pass = 0;
  for (; c0 + 32 * C <= dv; c0 += 32 * C, ++pass) {
    const auto [p, n] = pass <= 1 ? share(pass) : std::pair<const void* const*, int64_t>{nullptr, 0};
    pv_chunks<L, R, C>(pt, nk, vrows, dv, c0, alpha, o, p, std::min(n, (nk + 1) / 2), pf_bytes);
    for (int64_t t = (nk + 1) / 2; t < n; ++t) prefetch_row(p[t], pf_bytes);
  }
  for (; c0 < dv; c0 += 32, ++pass) {
    const auto [p, n] = pass <= 1 ? share(pass) : std::pair<const void* const*, int64_t>{nullptr, 0};
    pv_chunks<L, R, 1>(pt, nk, vrows, dv, c0, alpha, o, p, std::min(n, (nk + 1) / 2), pf_bytes);
    for (int64_t t = (nk + 1) / 2; t < n; ++t) prefetch_row(p[t], pf_bytes);
  }
}

// ---- vdpbf16ps variants (AVX512_BF16; e4m3 rows) ----
// With 4 query rows per K / V element (GQA 32 / 8) the fp32 kernels above spend, per key and
// 32 dims, the e4m3 -> bf16 lookup (7 ops), 2 widening ops and 2 FMAs per row on q.k, the same
// on P V. vdpbf16ps multiplies 2 bf16 pairs per fp32 lane and accumulates in fp32 (products
// exact, sums in fp32): 1 op per row for q.k on the looked-up rows as they come, and for P V 1
// op per row per 2 keys after one vpunpck[lh]wd per key interleaves two V rows. Measured
// (B = 4, Hq = 32, Hkv = 8, D = 128, kv 16k, 1 thread, Zen 5, docs/perf/cpu.md): e4m3 11.5 ->
// 9.9 ms. bf16 rows through the same kernels ran no faster there (12.6 -> 14.2 ms, perf: the
// time sat on the prefetches and loads, bf16 at twice the bytes bounded by memory). On Zen 4
// (2026-12-07, docs/perf/cpu.md) the fp32 kernels are the limit once the driver reads each tile
// in address order (run_unit's touch pass): 16 fp32 FMAs + 2 widening ops per row and 32 dims
// against 1 vdpbf16ps; B = 4, kv 16k, 1 thread, 11.0 -> 13.6 GB/s. So bf16 rows take them too.
// Facts of the instruction that decide where it may run: it reads bf16 subnormals as 0 and
// flushes subnormal results, ignoring MXCSR.
//   - q must be bf16 exactly (the driver hands bf16 queries times a power of two, and applies
//     the rest of the scale to the scores); a row that is not, or holds a subnormal, or an
//     element above 2^40, runs the fp32 kernel. With |q| <= 2^40, a flushed product moves a
//     score by at most d x 2^40 x 2^-126 < 2^-76: nothing a softmax sees.
//   - P is rounded to bf16 (as the GPU kernels do, DESIGN.md section 4); a flushed p < 2^-126
//     moves O by < 2^-126 |v|. e4m3 values are never subnormal as bf16 (the smallest is 2^-9).
//   - a subnormal bf16 K element is read as 0: with |q| <= 2^40 that moves a score by less than
//     d x 2^-86, nothing a softmax sees. A subnormal V element would move O by up to its own
//     size, which matters for outputs of that size: pv_chunks_dp flags it (Raw::kMayBeTiny) and
//     the call is redone with the fp32 kernel.
struct Bf16Raw {
  static constexpr bool kMayBeTiny = true;
  static __m512i load(const void* row, int64_t c) { return _mm512_loadu_si512(static_cast<const uint16_t*>(row) + c); }
};
// bf16 rows the driver has checked for subnormals already (its touch pass, touch_rows_avx512):
// no test per load and no O copy for a redo. In pv_rows_dp_t's loop the test (2 mask ops, a kmov
// and an or per V load) was ~35% of its samples (perf, B 4, kv 16k, 1 thread).
struct Bf16RawChecked {
  static constexpr bool kMayBeTiny = false;
  static __m512i load(const void* row, int64_t c) { return _mm512_loadu_si512(static_cast<const uint16_t*>(row) + c); }
};
struct E4m3Raw {
  static constexpr bool kMayBeTiny = false;
  static __m512i load(const void* row, int64_t c) {
    return e4m3x32_to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint8_t*>(row) + c)));
  }
};

// q rows [R][d] fp32 -> bf16 (qb), true when every element is exactly a normal bf16 or 0 and
// |q| <= 2^40.
template <int R>
inline bool q_to_bf16(const float* q, int64_t d, uint16_t* qb) {
  const __m512i lim = _mm512_set1_epi32(0x53800000);  // 2^40
  __mmask16 bad = 0;
  for (int64_t i = 0; i < R * d; i += 16) {
    const __m512i x = _mm512_loadu_si512(q + i);
    const __m512i a = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    bad |= _mm512_test_epi32_mask(x, _mm512_set1_epi32(0xffff));  // low half: not a bf16
    bad |= _mm512_mask_cmplt_epi32_mask(_mm512_test_epi32_mask(a, a), a, _mm512_set1_epi32(0x00800000));
    bad |= _mm512_cmpgt_epi32_mask(a, lim);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16)));
  }
  return bad == 0;
}

template <class L, int R, int RP>
inline void qk_keys_dp(const uint16_t* qb, int64_t d, const void* const* krows, int nk, float* st,
                       const void* const* pf = nullptr, int npf = 0, int64_t pf_bytes = 0) {
  constexpr int KB = 16 / RP;
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  const void* k[KB];
  for (int kb = 0; kb < KB; ++kb) k[kb] = krows[kb < nk ? kb : nk - 1];
  int ipf = 0;
  for (int64_t c = 0; c < d; c += 32) {
    if (ipf < npf) prefetch_row(pf[ipf++], pf_bytes);
    for (int kb = 0; kb < KB; ++kb) {
      const __m512bh kv = (__m512bh)L::load(k[kb], c);
      for (int r = 0; r < R; ++r) {
        __m512& a = acc[kb * RP + r];
        a = _mm512_dpbf16_ps(a, kv, (__m512bh)_mm512_loadu_si512(qb + r * d + c));
      }
    }
  }
  for (; ipf < npf; ++ipf) prefetch_row(pf[ipf], pf_bytes);
  store_key_sums<RP>(acc, nk, st);
}

template <class L, class Raw, int R>
void qk_rows_dp_t(const float* q, int64_t d, const void* const* krows, int64_t nk, float* st) {
  constexpr int RP = R <= 4 ? 4 : 8, KB = 16 / RP;
  alignas(64) uint16_t qb[8 * kMaxDim];
  if (!q_to_bf16<R>(q, d, qb)) return qk_rows_t<L, R>(q, d, krows, nk, st);
  over_key_blocks<KB>(krows, nk, st,
                      [&](const void* const* kr, int n, float* sb, const void* const* pf, int npf, int64_t pfb) {
                        qk_keys_dp<Raw, R, RP>(qb, d, kr, n, sb, pf, npf, pfb);
                      });
}

// The same with q already converted (rows_q_bf16_avx512, once per unit instead of once per call:
// the conversion was ~19% of this kernel's samples at 32 keys a call).
template <class Raw, int R>
void qk_rows_dpq_t(const uint16_t* qb, int64_t d, const void* const* krows, int64_t nk, float* st) {
  constexpr int RP = R <= 4 ? 4 : 8, KB = 16 / RP;
  over_key_blocks<KB>(krows, nk, st,
                      [&](const void* const* kr, int n, float* sb, const void* const* pf, int npf, int64_t pfb) {
                        qk_keys_dp<Raw, R, RP>(qb, d, kr, n, sb, pf, npf, pfb);
                      });
}

// O <-> the order of vpunpck[lh]wd's outputs: lo holds dims {0-3, 8-11, 16-19, 24-27} of the 32,
// hi {4-7, 12-15, 20-23, 28-31}.
inline void load_o_dp(const float* o, float alpha, __m512* lo, __m512* hi) {
  const __m512i il = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
  const __m512i ih = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  const __m512 a = _mm512_set1_ps(alpha), x = _mm512_loadu_ps(o), y = _mm512_loadu_ps(o + 16);
  *lo = _mm512_mul_ps(a, _mm512_permutex2var_ps(x, il, y));
  *hi = _mm512_mul_ps(a, _mm512_permutex2var_ps(x, ih, y));
}
inline void store_o_dp(float* o, __m512 lo, __m512 hi) {
  const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i i1 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  _mm512_storeu_ps(o, _mm512_permutex2var_ps(lo, i0, hi));
  _mm512_storeu_ps(o + 16, _mm512_permutex2var_ps(lo, i1, hi));
}

// Lanes of x (32 bf16) that are subnormal: exponent 0, mantissa not 0.
inline __mmask32 bf16_subnormal(__m512i x) {
  return _mm512_mask_test_epi16_mask(_mm512_testn_epi16_mask(x, _mm512_set1_epi16(0x7f80)), x, _mm512_set1_epi16(0x007f));
}

// pp [np][8]: bf16 pairs (p[2i][r], p[2i + 1][r]) of rows r < 8, keys [0, nk) (an odd last key
// paired with 0 and a zero row). *tiny |= whether a V element read is a subnormal bf16
// (Raw::kMayBeTiny only).
template <class Raw, int R, int C>
inline void pv_chunks_dp(const uint32_t* pp, int64_t nk, const void* const* vrows, int64_t dv, int64_t c0,
                         const float* alpha, float* o, const void* const* pf, int64_t npf, int64_t pf_bytes,
                         __mmask32* tiny) {
  __m512 lo[C][R], hi[C][R];
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) load_o_dp(o + r * dv + c0 + 32 * c, alpha[r], &lo[c][r], &hi[c][r]);
  for (int64_t j = 0; j < nk; j += 2) {
    if ((j >> 1) < npf) prefetch_row(pf[j >> 1], pf_bytes);
    const bool two = j + 1 < nk;
    for (int c = 0; c < C; ++c) {
      const __m512i a = Raw::load(vrows[j], c0 + 32 * c);
      const __m512i b = two ? Raw::load(vrows[j + 1], c0 + 32 * c) : _mm512_setzero_si512();
      if constexpr (Raw::kMayBeTiny) *tiny |= bf16_subnormal(a) | bf16_subnormal(b);
      const __m512bh vl = (__m512bh)_mm512_unpacklo_epi16(a, b), vh = (__m512bh)_mm512_unpackhi_epi16(a, b);
      for (int r = 0; r < R; ++r) {
        const __m512bh p = (__m512bh)_mm512_set1_epi32(static_cast<int>(pp[(j >> 1) * 8 + r]));
        lo[c][r] = _mm512_dpbf16_ps(lo[c][r], vl, p);
        hi[c][r] = _mm512_dpbf16_ps(hi[c][r], vh, p);
      }
    }
  }
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) store_o_dp(o + r * dv + c0 + 32 * c, lo[c][r], hi[c][r]);
}

template <class L, class Raw, int R>
void pv_rows_dp_t(const float* pt, int64_t nk, const void* const* vrows, int64_t dv, const float* alpha, float* o) {
  constexpr int C = R <= 2 ? 4 : R <= 4 ? 2 : 1;
  constexpr int64_t kBlock = 512;  // keys per block of bf16 P pairs on the stack (8 KB)
  const void* const* pf = tl_pf.v;
  const int64_t npf = pf ? tl_pf.n : 0, pf_bytes = tl_pf.v_bytes;
  tl_pf.v = nullptr;
  alignas(64) uint32_t pp[kBlock / 2 * 8];
  float one[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  // O as it came, for the fp32 redo of a call that met a subnormal V element (Raw::kMayBeTiny).
  alignas(64) float o_in[Raw::kMayBeTiny ? R * kMaxDim : 1];
  if constexpr (Raw::kMayBeTiny) std::copy(o, o + R * dv, o_in);
  __mmask32 tiny = 0;
  for (int64_t j0 = 0; j0 < nk; j0 += kBlock) {
    const int64_t n = std::min(kBlock, nk - j0);
    for (int64_t i = 0; 2 * i < n; ++i) {
      const __m128bh a = _mm256_cvtneps_pbh(_mm256_loadu_ps(pt + (j0 + 2 * i) * 8));
      const __m128bh b = 2 * i + 1 < n ? _mm256_cvtneps_pbh(_mm256_loadu_ps(pt + (j0 + 2 * i + 1) * 8))
                                       : (__m128bh)_mm_setzero_si128();
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pp + i * 8),
                          _mm256_set_m128i(_mm_unpackhi_epi16((__m128i)a, (__m128i)b), _mm_unpacklo_epi16((__m128i)a, (__m128i)b)));
    }
    // The rows of the next call (the first block's job) over its first two passes over dv, a
    // row per two keys, as pv_rows_t spreads them (all in one pass, the bf16 decode ran ~15%
    // slower: B = 4, kv 16k, 1 thread, 14.7 ms against 12.8).
    const int64_t passes = dv / (32 * C) + dv % (32 * C) / 32;
    const int64_t half = j0 > 0 ? 0 : passes <= 1 ? npf : (npf + 1) / 2;
    const float* al = j0 == 0 ? alpha : one;
    int64_t c0 = 0, pass = 0, done = 0;
    auto share = [&](int64_t* from) {  // this pass's part of pf: [*from, end)
      const int64_t end = j0 > 0 ? 0 : pass == 0 ? half : pass == 1 ? npf : done;
      *from = done;
      done = std::max(done, end);
      return std::max<int64_t>(0, end - *from);
    };
    for (; c0 < dv; ++pass) {
      int64_t from = 0;
      const int64_t cnt = share(&from), take = std::min(cnt, (n + 1) / 2);
      if (c0 + 32 * C <= dv) {
        pv_chunks_dp<Raw, R, C>(pp, n, vrows + j0, dv, c0, al, o, pf ? pf + from : nullptr, take, pf_bytes, &tiny);
        c0 += 32 * C;
      } else {
        pv_chunks_dp<Raw, R, 1>(pp, n, vrows + j0, dv, c0, al, o, pf ? pf + from : nullptr, take, pf_bytes, &tiny);
        c0 += 32;
      }
      for (int64_t t = take; t < cnt; ++t) prefetch_row(pf[from + t], pf_bytes);
    }
    if (j0 == 0)
      for (int64_t t = done; t < npf; ++t) prefetch_row(pf[t], pf_bytes);
  }
  if (Raw::kMayBeTiny && tiny) {
    std::copy(o_in, o_in + R * dv, o);
    pv_rows_t<L, R>(pt, nk, vrows, dv, alpha, o);
  }
}

template <template <class, int> class F, class L, class... A>
void by_rows(int64_t rows, A... a) {
  switch (rows) {
    case 1: return F<L, 1>::run(a...);
    case 2: return F<L, 2>::run(a...);
    case 3: return F<L, 3>::run(a...);
    case 4: return F<L, 4>::run(a...);
    case 5: return F<L, 5>::run(a...);
    case 6: return F<L, 6>::run(a...);
    case 7: return F<L, 7>::run(a...);
    default: return F<L, 8>::run(a...);
  }
}
template <class L, int R>
struct Qk {
  static void run(const float* q, int64_t d, const void* const* krows, int64_t nk, float* st) {
    qk_rows_t<L, R>(q, d, krows, nk, st);
  }
};
template <class L, int R>
struct Pv {
  static void run(const float* pt, int64_t nk, const void* const* vrows, int64_t dv, const float* alpha, float* o) {
    pv_rows_t<L, R>(pt, nk, vrows, dv, alpha, o);
  }
};

// The raw (bf16 bit pattern) loader of the rows a vdpbf16ps kernel reads: e4m3 and bf16 rows.
template <class L>
struct RawOf;
template <>
struct RawOf<E4m3Rows> {
  using type = E4m3Raw;
};
template <>
struct RawOf<Bf16Rows> {
  using type = Bf16Raw;
};
template <class L, int R>
struct QkDp {
  static void run(const float* q, int64_t d, const void* const* krows, int64_t nk, float* st) {
    qk_rows_dp_t<L, typename RawOf<L>::type, R>(q, d, krows, nk, st);
  }
};
template <class L, int R>
struct PvDp {
  static void run(const float* pt, int64_t nk, const void* const* vrows, int64_t dv, const float* alpha, float* o) {
    pv_rows_dp_t<L, typename RawOf<L>::type, R>(pt, nk, vrows, dv, alpha, o);
  }
};
template <class L, int R>
struct PvDpChecked {  // bf16 V free of subnormals (the driver's touch pass said so)
  static void run(const float* pt, int64_t nk, const void* const* vrows, int64_t dv, const float* alpha, float* o) {
    pv_rows_dp_t<L, Bf16RawChecked, R>(pt, nk, vrows, dv, alpha, o);
  }
};
template <class L, int R>
struct QkDpQ {
  static void run(const uint16_t* qb, int64_t d, const void* const* krows, int64_t nk, float* st) {
    qk_rows_dpq_t<typename RawOf<L>::type, R>(qb, d, krows, nk, st);
  }
};

// The loader of a row dtype, or false where these kernels do not apply.
template <template <class, int> class F, class... A>
bool dispatch(DType t, int64_t rows, A... a) {
  switch (t) {
    case DType::bfloat16: by_rows<F, Bf16Rows>(rows, a...); return true;
    case DType::float16: by_rows<F, F16Rows>(rows, a...); return true;
    case DType::float32: by_rows<F, F32Rows>(rows, a...); return true;
    case DType::float8_e4m3: by_rows<F, E4m3Rows>(rows, a...); return true;
    default: return false;
  }
}

}  // namespace

void qk_rows_avx512(const float* q, int64_t rows, int64_t d, const void* const* krows, DType t, int64_t nk,
                    float* st) {
  if (d % 32 != 0 || d > kMaxDim || nk <= 0 || !dispatch<Qk>(t, rows, q, d, krows, nk, st)) {
    // The AVX2 kernels take no prefetch list: its rows in one burst here (K and V).
    const RowPrefetch pf = tl_pf;
    tl_pf = RowPrefetch{};
    for (int64_t j = 0; j < pf.n; ++j) {
      if (pf.k) prefetch_row(pf.k[j], pf.k_bytes);
      if (pf.v) prefetch_row(pf.v[j], pf.v_bytes);
    }
    avx2_kernels().qk_rows(q, rows, d, krows, t, nk, st);
  }
}

void qk_rows_avx512bf16(const float* q, int64_t rows, int64_t d, const void* const* krows, DType t, int64_t nk,
                        float* st) {
  if (d % 32 == 0 && d <= kMaxDim && nk > 0) {
    if (t == DType::float8_e4m3) return by_rows<QkDp, E4m3Rows>(rows, q, d, krows, nk, st);
    if (t == DType::bfloat16) return by_rows<QkDp, Bf16Rows>(rows, q, d, krows, nk, st);
  }
  qk_rows_avx512(q, rows, d, krows, t, nk, st);
}

void pv_rows_avx512bf16(const float* pt, int64_t rows, int64_t nk, const void* const* vrows, DType t, int64_t dv,
                        const float* alpha, float* o) {
  if (dv % 32 == 0 && nk > 0) {
    if (t == DType::float8_e4m3) return by_rows<PvDp, E4m3Rows>(rows, pt, nk, vrows, dv, alpha, o);
    // (bf16: dv <= kMaxDim, the size of the O copy its fp32 redo restores)
    if (t == DType::bfloat16 && dv <= kMaxDim) return by_rows<PvDp, Bf16Rows>(rows, pt, nk, vrows, dv, alpha, o);
  }
  pv_rows_avx512(pt, rows, nk, vrows, t, dv, alpha, o);
}

bool rows_q_bf16_avx512(const float* q, int64_t rows, int64_t d, uint16_t* qb) {
  if (d % 32 != 0 || d > kMaxDim || rows < 1 || rows > 8) return false;
  const __m512i lim = _mm512_set1_epi32(0x53800000);  // 2^40, as q_to_bf16
  __mmask16 bad = 0;
  for (int64_t i = 0; i < rows * d; i += 16) {
    const __m512i x = _mm512_loadu_si512(q + i);
    const __m512i a = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    bad |= _mm512_test_epi32_mask(x, _mm512_set1_epi32(0xffff));
    bad |= _mm512_mask_cmplt_epi32_mask(_mm512_test_epi32_mask(a, a), a, _mm512_set1_epi32(0x00800000));
    bad |= _mm512_cmpgt_epi32_mask(a, lim);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16)));
  }
  return bad == 0;
}

void qk_rows_avx512bf16_q(const uint16_t* qb, int64_t rows, int64_t d, const void* const* krows, DType t, int64_t nk,
                          float* st) {
  if (nk <= 0) return;
  if (t == DType::float8_e4m3) return by_rows<QkDpQ, E4m3Rows>(rows, qb, d, krows, nk, st);
  by_rows<QkDpQ, Bf16Rows>(rows, qb, d, krows, nk, st);
}

void pv_rows_avx512bf16_checked(const float* pt, int64_t rows, int64_t nk, const void* const* vrows, DType t,
                                int64_t dv, const float* alpha, float* o) {
  if (t == DType::bfloat16 && dv % 32 == 0 && dv <= kMaxDim && nk > 0)
    return by_rows<PvDpChecked, Bf16Rows>(rows, pt, nk, vrows, dv, alpha, o);
  pv_rows_avx512bf16(pt, rows, nk, vrows, t, dv, alpha, o);
}

bool touch_rows_avx512(const void* const* const* k, const void* const* const* v, int nh, int64_t n, bool key_major,
                       int64_t k_bytes, int64_t v_bytes) {
  if (k_bytes <= 0 || v_bytes <= 0 || v_bytes % 64 != 0) return false;
  // bf16 subnormal <=> (x & 0x7fff) - 1 < 0x7f (unsigned): a running unsigned minimum, no mask
  // registers in the loop.
  __m512i mn = _mm512_set1_epi16(-1);
  const int64_t outer = key_major ? n : nh, inner = key_major ? nh : n;
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t c = 0; c < inner; ++c) {
      const int64_t h = key_major ? c : a, t = key_major ? a : c;
      const char* kp = static_cast<const char*>(k[h][t]);
      const char* vp = static_cast<const char*>(v[h][t]);
      // K: one demand load per line (its start, then the line starts after it); V: the row's
      // 64-byte pieces as vectors (they cover its lines), tested; the two alternating.
      const char* ke = kp + k_bytes;
      const char* ve = vp + v_bytes;
      (void)*reinterpret_cast<const volatile char*>(kp);
      const char* ck = reinterpret_cast<const char*>((reinterpret_cast<uintptr_t>(kp) | uintptr_t{63}) + 1);
      for (const char* cv = vp; cv < ve; cv += 64) {
        const __m512i x = _mm512_loadu_si512(cv);
        mn = _mm512_min_epu16(mn, _mm512_sub_epi16(_mm512_and_si512(x, _mm512_set1_epi16(0x7fff)), _mm512_set1_epi16(1)));
        if (ck < ke) {
          (void)*reinterpret_cast<const volatile char*>(ck);
          ck += 64;
        }
      }
      for (; ck < ke; ck += 64) (void)*reinterpret_cast<const volatile char*>(ck);
    }
  return _mm512_cmplt_epu16_mask(mn, _mm512_set1_epi16(0x7f)) == 0;
}

void rows_prefetch_avx512(const void* const* krows, const void* const* vrows, int64_t n, int64_t k_bytes,
                          int64_t v_bytes) {
  tl_pf = RowPrefetch{krows, vrows, n, k_bytes, v_bytes};
}

void pv_rows_avx512(const float* pt, int64_t rows, int64_t nk, const void* const* vrows, DType t, int64_t dv,
                    const float* alpha, float* o) {
  if (dv % 32 != 0 || nk <= 0 || !dispatch<Pv>(t, rows, pt, nk, vrows, dv, alpha, o)) {
    if (tl_pf.v)
      for (int64_t j = 0; j < tl_pf.n; ++j) prefetch_row(tl_pf.v[j], tl_pf.v_bytes);
    tl_pf.v = nullptr;
    avx2_kernels().pv_rows(pt, rows, nk, vrows, t, dv, alpha, o);
  }
}

}  // namespace fa4::core::cpu
