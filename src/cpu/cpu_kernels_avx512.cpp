// AVX-512 kernels (F/BW/VL/DQ; BF16 for the 16-bit products). Compiled with the AVX-512 flags
// (CMake: *_avx512.cpp) and only called after cpu_isa.cpp saw those features at run time.
//
// fp32 products (fp32 inputs; fp16 where there is no AMX: AVX-512 has no fp16 dot product with
// fp32 accumulation before AVX10.2, and three vdpbf16ps per hi/lo product retire fewer
// multiply-adds than one fp32 FMA): the transposed micro-kernels of the AVX2 table with 16
// queries per vector and 32 registers, NB broadcast rows x MV vectors of accumulators:
//   MV = 3: NB = 8 (24 acc)   MV = 2: NB = 12 (24 acc)   MV = 1: NB = 16 (16 acc)
// Two 512-bit FMA pipes x 4-cycle latency need 8 independent chains; an inner step issues NB
// broadcasts (embedded {1to16} operands) + MV loads for NB * MV FMAs.
//
// 16-bit products: vdpbf16ps on the packed panels of cpu_kernels.h (also what the AMX table
// reads), two products per lane per instruction: a dword broadcast of K (or V^T) holds one pair
// of dims (keys), the other operand is one row of Q^T (P^T) pairs for 16 queries.
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_* idiom.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

// Deliberately no core/*.h helpers here (see cpu_kernels_avx2.cpp): an inline function compiled
// in this file could be the copy the linker keeps for the whole library.
#include "cpu/cpu_kernels.h"

namespace fa4::core::cpu {
namespace {

inline int64_t rup(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
inline __mmask16 head_mask(int64_t k) { return k >= 16 ? __mmask16(0xffff) : __mmask16((1u << k) - 1); }
inline __m256i bf16_bits(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }  // round to nearest even
inline __m512 bf16_widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
inline __m512i pair16(__m256i a, __m256i b) {  // dword i = a[i] | b[i] << 16
  return _mm512_or_si512(_mm512_cvtepu16_epi32(a), _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

// ---------------------------------------------------------------------------------------------
// fp32 transposed micro-kernels (same contracts as the AVX2 table, m a multiple of 16).

// S^T block: keys kr[0..NB) x queries [0, 16 MV), summed over d.
template <int NB, int MV>
inline void qk_block(const float* qt, int64_t mp, int64_t d, const float* const* kr, float* st) {
  __m512 c[NB][MV];
#pragma GCC unroll 16
  for (int n = 0; n < NB; ++n)
#pragma GCC unroll 3
    for (int v = 0; v < MV; ++v) c[n][v] = _mm512_setzero_ps();
  const float* k[NB];
#pragma GCC unroll 16
  for (int n = 0; n < NB; ++n) k[n] = kr[n];
  for (int64_t dd = 0; dd < d; ++dd) {
    __m512 x[MV];
#pragma GCC unroll 3
    for (int v = 0; v < MV; ++v) x[v] = _mm512_loadu_ps(qt + dd * mp + 16 * v);
#pragma GCC unroll 16
    for (int n = 0; n < NB; ++n) {
      const __m512 bc = _mm512_set1_ps(k[n][dd]);
#pragma GCC unroll 3
      for (int v = 0; v < MV; ++v) c[n][v] = _mm512_fmadd_ps(bc, x[v], c[n][v]);
    }
  }
#pragma GCC unroll 16
  for (int n = 0; n < NB; ++n)
#pragma GCC unroll 3
    for (int v = 0; v < MV; ++v) _mm512_storeu_ps(st + n * mp + 16 * v, c[n][v]);
}

template <int MV, int NB>
inline void qk_tail(int nb, const float* qt, int64_t mp, int64_t d, const float* const* kr, float* st) {
  if constexpr (NB > 1) {
    if (nb == NB - 1) return qk_block<NB - 1, MV>(qt, mp, d, kr, st);
    return qk_tail<MV, NB - 1>(nb, qt, mp, d, kr, st);
  }
}

template <int NB, int MV>
void qk_t(const float* qt, int64_t mp, int64_t m, int64_t d, const float* const* krows, int64_t nk, float* st) {
  for (int64_t m0 = 0; m0 < m; m0 += 16 * MV) {
    int64_t n0 = 0;
    for (; n0 + NB <= nk; n0 += NB) qk_block<NB, MV>(qt + m0, mp, d, krows + n0, st + n0 * mp + m0);
    if (n0 < nk) qk_tail<MV, NB>(static_cast<int>(nk - n0), qt + m0, mp, d, krows + n0, st + n0 * mp + m0);
  }
}

void qk_avx512(const float* qt, int64_t mp, int64_t m, int64_t d, const float* const* krows, int64_t nk, float* st) {
  if (m % 48 == 0) return qk_t<8, 3>(qt, mp, m, d, krows, nk, st);
  if (m % 32 == 0) return qk_t<12, 2>(qt, mp, m, d, krows, nk, st);
  return qk_t<16, 1>(qt, mp, m, d, krows, nk, st);
}

// O^T block: value dims [e0, e0 + NB) x queries [0, 16 MV), rescaled by alpha, over nk keys.
template <int NB, int MV>
inline void pv_block(const float* pt, int64_t mp, int64_t nk, const float* const* vr, int64_t e0, const float* alpha,
                     float* ot) {
  __m512 c[NB][MV];
  {
    __m512 a[MV];
#pragma GCC unroll 3
    for (int v = 0; v < MV; ++v) a[v] = _mm512_loadu_ps(alpha + 16 * v);
#pragma GCC unroll 16
    for (int n = 0; n < NB; ++n)
#pragma GCC unroll 3
      for (int v = 0; v < MV; ++v) c[n][v] = _mm512_mul_ps(a[v], _mm512_loadu_ps(ot + n * mp + 16 * v));
  }
  for (int64_t j = 0; j < nk; ++j) {
    __m512 x[MV];
#pragma GCC unroll 3
    for (int v = 0; v < MV; ++v) x[v] = _mm512_loadu_ps(pt + j * mp + 16 * v);
    const float* vj = vr[j] + e0;
#pragma GCC unroll 16
    for (int n = 0; n < NB; ++n) {
      const __m512 bc = _mm512_set1_ps(vj[n]);
#pragma GCC unroll 3
      for (int v = 0; v < MV; ++v) c[n][v] = _mm512_fmadd_ps(bc, x[v], c[n][v]);
    }
  }
#pragma GCC unroll 16
  for (int n = 0; n < NB; ++n)
#pragma GCC unroll 3
    for (int v = 0; v < MV; ++v) _mm512_storeu_ps(ot + n * mp + 16 * v, c[n][v]);
}

template <int MV, int NB>
inline void pv_tail(int nb, const float* pt, int64_t mp, int64_t nk, const float* const* vr, int64_t e0,
                    const float* alpha, float* ot) {
  if constexpr (NB > 1) {
    if (nb == NB - 1) return pv_block<NB - 1, MV>(pt, mp, nk, vr, e0, alpha, ot);
    return pv_tail<MV, NB - 1>(nb, pt, mp, nk, vr, e0, alpha, ot);
  }
}

template <int NB, int MV>
void pv_t(const float* pt, int64_t mp, int64_t m, int64_t nk, const float* const* vrows, int64_t dv,
          const float* alpha, float* ot) {
  for (int64_t m0 = 0; m0 < m; m0 += 16 * MV) {
    int64_t e0 = 0;
    for (; e0 + NB <= dv; e0 += NB) pv_block<NB, MV>(pt + m0, mp, nk, vrows, e0, alpha + m0, ot + e0 * mp + m0);
    if (e0 < dv) pv_tail<MV, NB>(static_cast<int>(dv - e0), pt + m0, mp, nk, vrows, e0, alpha + m0, ot + e0 * mp + m0);
  }
}

void pv_avx512(const float* pt, int64_t mp, int64_t m, int64_t nk, const float* const* vrows, int64_t dv,
               const float* alpha, float* ot) {
  if (m % 48 == 0) return pv_t<8, 3>(pt, mp, m, nk, vrows, dv, alpha, ot);
  if (m % 32 == 0) return pv_t<12, 2>(pt, mp, m, nk, vrows, dv, alpha, ot);
  return pv_t<16, 1>(pt, mp, m, nk, vrows, dv, alpha, ot);
}

// ---------------------------------------------------------------------------------------------
// Softmax step (contract in cpu_kernels.h), 16 query rows per vector; m may end in a half vector
// (the row-major decode tiles have mp = 8), handled with a lane mask.

// 2^x as vscalefps(fit(f), x), f = x - floor(x) in [0, 1] by one vreduceps and fit a
// polynomial of 2^f on [0, 1] with p(0) = 1 (coefficients highest degree first, evaluated by
// Horner): vscalefps multiplies by 2^floor(x) itself and saturates: 0 for x = -inf (vreduceps
// gives 0 there) or far below -149 (subnormal results in between, as IEEE exp2 gives), inf above
// 128, NaN stays NaN. 2 + degree vector ops.
template <int N>
inline __m512 exp2_fit(__m512 x, const float (&c)[N]) {
  const __m512 f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_set1_ps(c[0]);
#pragma GCC unroll 8
  for (int i = 1; i < N; ++i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c[i]));
  return _mm512_scalef_ps(p, x);
}

// 2^x in 8 vector ops: the degree-6 fit (7.3e-8 relative over [-126, 0] measured, below the
// ~1.5 ulp of the Cephes polynomial on x - round(x) this replaced, which took 13 ops with its
// clamps and mask).
inline __m512 exp2_512(__m512 x) {
  static constexpr float c[] = {2.1613016724586487e-4f, 1.24678376596421e-3f, 9.675449691712856e-3f,
                                5.5485282093286514e-2f, 2.402293086051941e-1f, 6.931470632553101e-1f, 1.0f};
  return exp2_fit(x, c);
}

// tanh(x) = sign(x) (1 - t) / (1 + t), t = e^{-2|x|}, for |x| >= 0.625 (no overflow for any x);
// below, 1 - t cancels, so the Cephes odd polynomial x + x^3 P(x^2) keeps ~1e-7 relative error
// for the tiny arguments of huge softcaps (softcap = 1e4 .. 1e37).
inline __m512 tanh_512(__m512 x) {
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 t = exp2_512(_mm512_mul_ps(ax, _mm512_set1_ps(-2.0f * 1.4426950408889634f)));
  const __m512 big = _mm512_div_ps(_mm512_sub_ps(_mm512_set1_ps(1.0f), t), _mm512_add_ps(_mm512_set1_ps(1.0f), t));
  const __m512 z = _mm512_mul_ps(ax, ax);
  __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036e-1f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422e-1f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), ax, ax);
  const __mmask16 lt = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);  // NaN: big
  const __m512 r = _mm512_mask_blend_ps(lt, big, small);
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));
}

// 2^x for the 16-bit P of the pv product (P is rounded to bf16, or bf16 hi + lo for fp16, and
// x <= ~0 after the max subtraction): exp2_fit with a degree-4 fit, p(0) = 1 (2.98e-6 relative
// in fp32 over [0, 1], checked at 2e6 points: 1/1300 of a bf16 P's rounding, 1/2.5 of an fp16
// P's hi + lo split; l sums the same p, so a common factor cancels): 6 vector uops. The degree-5
// fit before it (1.6e-7) took 7, the form before that (a clamp at -126, vrndscaleps -- 2 uops --,
// a subtraction and a masked vscalefps to return exactly 0 below -126) 11. Below -126 the result
// is subnormal down to -149, then 0 (the bf16 P flushes it: a weight < 2^-126 of a finite V --
// the driver runs tiles with a non-finite V on the exact fp32 P V instead).
inline __m512 exp2_p(__m512 x) {
  static constexpr float c[] = {1.342655997723341e-2f, 5.224267393350601e-2f, 2.4128010869026184e-1f,
                                6.930448412895203e-1f, 1.0f};
  return exp2_fit(x, c);
}

// Dword i of the result = (bf16(a[i]), bf16(b[i])): vcvtne2ps2bf16 puts b's 16 bf16 in the low
// half and a's in the high half, one vpermw interleaves them (3 uops where two vcvtneps2bf16 +
// two zero-extensions + shift + or took 8).
inline __m512i bf16_pairs(__m512 a, __m512 b) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

// The row-major decode tiles (st [nk][8], all 8 rows, no mask / softcap / raw scores, nk
// even): two keys per vector instead of one key in a half vector. Through the general loop
// below this step was 37% of an in-cache decode (B = 1, 4 query rows, 2048 keys, 1 thread),
// more than the q.k and p.v kernels; same operations, same results. With s.redo, the driver's
// extreme-score check (a visible score NaN or of magnitude >= kExtremeScore) rides on the max pass: a
// min beside the max, and the row sum for NaN (as the general loop below does it); the separate
// scalar pass over the tile (flag_extreme_rows) was ~5% of a decode's kernel time (perf, B 4,
// kv 16k, 1 thread).
template <bool kCheck>
void softmax_rows8_t(const SoftmaxStep& s) {
  const __m512 log2e = _mm512_set1_ps(1.4426950408889634f);
  const int64_t nv = s.nk / 2;
  __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mn = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  for (int64_t v = 0; v < nv; ++v) {
    const __m512 x = _mm512_loadu_ps(s.st + 16 * v);
    mx = _mm512_max_ps(mx, x);
    if constexpr (kCheck) mn = _mm512_min_ps(mn, x);
  }
  mx = _mm512_max_ps(mx, _mm512_shuffle_f32x4(mx, mx, 0x4e));  // both 8-row halves: the row max
  const __m512 m_old = _mm512_broadcast_f32x8(_mm256_loadu_ps(s.m_run));
  const __m512 m_new = _mm512_max_ps(mx, m_old);
  const __m512 m_use = _mm512_maskz_mov_ps(
      _mm512_cmp_ps_mask(m_new, _mm512_set1_ps(-std::numeric_limits<float>::infinity()), _CMP_NEQ_UQ), m_new);
  __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
  __m512 pmin = _mm512_set1_ps(1.0f);  // min_ps(p, pmin) keeps pmin where p is NaN
  int64_t v = 0;
  for (; v + 2 <= nv; v += 2) {
    const __m512 p0 = exp2_512(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(s.st + 16 * v), m_use), log2e));
    const __m512 p1 = exp2_512(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(s.st + 16 * v + 16), m_use), log2e));
    _mm512_storeu_ps(s.st + 16 * v, p0);
    _mm512_storeu_ps(s.st + 16 * v + 16, p1);
    sum0 = _mm512_add_ps(sum0, p0);
    sum1 = _mm512_add_ps(sum1, p1);
    pmin = _mm512_min_ps(p1, _mm512_min_ps(p0, pmin));
  }
  if (v < nv) {
    const __m512 p0 = exp2_512(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(s.st + 16 * v), m_use), log2e));
    _mm512_storeu_ps(s.st + 16 * v, p0);
    sum0 = _mm512_add_ps(sum0, p0);
    pmin = _mm512_min_ps(p0, pmin);
  }
  if (s.zero_p && _mm512_cmp_ps_mask(pmin, _mm512_setzero_ps(), _CMP_EQ_OQ)) *s.zero_p = 1;
  __m512 sum = _mm512_add_ps(sum0, sum1);
  sum = _mm512_add_ps(sum, _mm512_shuffle_f32x4(sum, sum, 0x4e));
  const __mmask16 lanes = 0xff;
  if constexpr (kCheck) {
    mn = _mm512_min_ps(mn, _mm512_shuffle_f32x4(mn, mn, 0x4e));
    const __mmask16 ext = (_mm512_cmp_ps_mask(mx, _mm512_set1_ps(kExtremeScore), _CMP_GE_OQ) |
                           _mm512_cmp_ps_mask(mn, _mm512_set1_ps(-kExtremeScore), _CMP_LE_OQ) |
                           _mm512_cmp_ps_mask(sum, sum, _CMP_UNORD_Q)) & lanes;
    for (int i = 0; i < 8; ++i)
      if (ext >> i & 1) s.redo[i] = 1;
  }
  const __m512 a = exp2_512(_mm512_mul_ps(_mm512_sub_ps(m_old, m_use), log2e));
  _mm512_mask_storeu_ps(s.alpha, lanes, a);
  const __m512 l = _mm512_maskz_loadu_ps(lanes, s.l_run);
  _mm512_mask_storeu_ps(s.l_run, lanes, _mm512_fmadd_ps(l, a, sum));
  _mm512_mask_storeu_ps(s.m_run, lanes, m_new);
}

void softmax_avx512(const SoftmaxStep& s) {
  if (s.mp == 8 && s.m == 8 && s.nk % 2 == 0 && s.softcap_in == 0.0f && !s.lo && !s.pp && s.scale == 1.0f &&
      !s.log2_units)
    return s.redo ? softmax_rows8_t<true>(s) : softmax_rows8_t<false>(s);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 pos_inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const bool cap = s.softcap_in != 0.0f, check = s.redo != nullptr;
  // The 16-bit P pass (s.pp) computes the exponent of p in one FMA, x c - m c (c = scale log2 e), where
  // the exact form rounds x scale, subtracts the rounded max and multiplies by log2 e (3 ops in a
  // chain of 12 cycles: the step is bound by the latency its ~20 uops in flight per vector keep
  // in the scheduler, not by the FP ports -- 12.6 cycles per 16 scores measured against ~7 of
  // port time). The fused form gives the max score an exponent of up to ~3 x 2^-24 |m log2 e|
  // instead of 0: a change of the score below its own fp32 rounding, < 0.02 for the |m| <
  // kExtremeScore every step sees (rows beyond are flagged here or by the driver, and
  // recomputed in fp64).
  const __m512 cap_in = _mm512_set1_ps(s.softcap_in), cap_out = _mm512_set1_ps(s.softcap_out);
  const __m512 log2e = _mm512_set1_ps(1.4426950408889634f);
  const __m512 scale = _mm512_set1_ps(s.scale), big = _mm512_set1_ps(kExtremeScore);
  for (int64_t m0 = 0; m0 < s.m; m0 += 16) {
    const __mmask16 lanes = head_mask(s.m - m0);
    float* col = s.st + m0;
    // Pass 1: scale, extreme check, softcap, mask (all stored back: pass 2 then sees scale 1),
    // row max (the reduction over keys is vertical). Without softcap or mask, st is only read:
    // max and min of the raw products, scaled once (scale > 0 and rounding are monotone, so
    // that is the max / min of the scaled scores).
    __m512 mx = neg_inf, mn = pos_inf, pscale = scale;
    __mmask16 ext = 0;
    if (cap || s.lo) {
      __m512i lo = _mm512_setzero_si512(), hi = lo;
      if (s.lo) {
        lo = _mm512_maskz_loadu_epi32(lanes, s.lo + m0);
        hi = _mm512_maskz_loadu_epi32(lanes, s.hi + m0);
      }
      for (int64_t n = 0; n < s.nk; ++n) {
        __m512 x = _mm512_mul_ps(scale, _mm512_maskz_loadu_ps(lanes, col + n * s.mp));
        __mmask16 vis = lanes;
        if (s.lo) {
          const __m512i nv = _mm512_set1_epi32(static_cast<int32_t>(n));
          vis = _mm512_cmple_epi32_mask(lo, nv) & _mm512_cmpgt_epi32_mask(hi, nv);
        }
        if (check) ext |= vis & _mm512_cmp_ps_mask(_mm512_abs_ps(x), big, _CMP_NLT_UQ);
        if (cap) x = _mm512_mul_ps(cap_out, tanh_512(_mm512_mul_ps(x, cap_in)));
        if (s.lo) x = _mm512_mask_blend_ps(vis, neg_inf, x);
        _mm512_mask_storeu_ps(col + n * s.mp, lanes, x);
        mx = _mm512_max_ps(mx, x);
      }
      pscale = _mm512_set1_ps(1.0f);
    } else if (s.raw_max) {  // the pass below, done by the product (LowpKernels::qk_max)
      mx = _mm512_maskz_loadu_ps(lanes, s.raw_max + m0);
      mn = _mm512_maskz_loadu_ps(lanes, s.raw_min + m0);
    } else {
      // Four accumulators each: one chain of max_ps (4 cycles of latency per key) made this
      // pass a third of the step (bf16 D 128, 96 x 512 tiles, AMX machine).
      __m512 mx1 = neg_inf, mx2 = neg_inf, mx3 = neg_inf, mn1 = pos_inf, mn2 = pos_inf, mn3 = pos_inf;
      int64_t n = 0;
      for (; n + 4 <= s.nk; n += 4) {
        const __m512 x0 = _mm512_maskz_loadu_ps(lanes, col + n * s.mp);
        const __m512 x1 = _mm512_maskz_loadu_ps(lanes, col + (n + 1) * s.mp);
        const __m512 x2 = _mm512_maskz_loadu_ps(lanes, col + (n + 2) * s.mp);
        const __m512 x3 = _mm512_maskz_loadu_ps(lanes, col + (n + 3) * s.mp);
        mx = _mm512_max_ps(mx, x0);
        mx1 = _mm512_max_ps(mx1, x1);
        mx2 = _mm512_max_ps(mx2, x2);
        mx3 = _mm512_max_ps(mx3, x3);
        if (check) {
          mn = _mm512_min_ps(mn, x0);
          mn1 = _mm512_min_ps(mn1, x1);
          mn2 = _mm512_min_ps(mn2, x2);
          mn3 = _mm512_min_ps(mn3, x3);
        }
      }
      for (; n < s.nk; ++n) {
        const __m512 x = _mm512_maskz_loadu_ps(lanes, col + n * s.mp);
        mx = _mm512_max_ps(mx, x);
        if (check) mn = _mm512_min_ps(mn, x);
      }
      mx = _mm512_max_ps(_mm512_max_ps(mx, mx1), _mm512_max_ps(mx2, mx3));
      if (check) mn = _mm512_min_ps(_mm512_min_ps(mn, mn1), _mm512_min_ps(mn2, mn3));
    }
    if (!(cap || s.lo)) {
      mx = _mm512_mul_ps(mx, scale);
      // A NaN score is not kept by max_ps / min_ps (where one is left in mx, m_new below drops
      // it): it reaches the row sum instead (below).
      if (check)
        ext = _mm512_cmp_ps_mask(mx, big, _CMP_GE_OQ) |
              _mm512_cmp_ps_mask(_mm512_mul_ps(mn, scale), _mm512_set1_ps(-kExtremeScore), _CMP_LE_OQ);
    }
    // NaN scores are not kept by max_ps; they poison the row through p and l instead.
    const __m512 m_old = _mm512_maskz_loadu_ps(lanes, s.m_run + m0);
    // No conditional rescale (FA4's stale max, kept while the new one exceeds it by <= 8 in
    // log2 units): measured here (bf16, D = 128, S = 2048, outlier inputs) it tripled the rel-L2
    // error (4.4e-4 -> 1.5e-3: P up to 2^8 is rounded to bf16 where the row's largest term would
    // be exactly 1) for no measurable speed; blocks whose max did not move still skip the O^T
    // rescale (alpha = 1, rescale_ot_avx512).
    const __m512 m_new = _mm512_max_ps(mx, m_old);
    const __m512 m_use = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m_new, neg_inf, _CMP_NEQ_UQ), m_new);  // -inf -> 0
    // Pass 2: p = 2^((s - m) log2 e) (log2 e after the max: s - m <= 0 cannot overflow), row sums
    // in two accumulators. The fp32 pass (P^T back into st, for the exact P V of non-finite V
    // and the fp32 products) keeps s = x * scale rounded exactly as the max was: a fused x *
    // scale - m keeps the exact product, and for scores of ~1e37 (keys of ~3e38) its difference
    // from the rounded max is up to half an ulp of the score, ~1e30 -- an ex2 of +-1e30 gave the
    // row's largest score a weight of inf or 0 (a fuzzer finding: NaN outputs). The 16-bit pass
    // fuses (the comment at the top of this function): a flagged row's P may be inf or NaN
    // there, which stays in that row's own column of O^T (every product keeps query columns
    // apart) until the driver recomputes the row in fp64.
    // (The explicit-rounding multiply: GCC contracts a plain mul + sub back into an FMA.)
    __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
    // Two minima (one op on each chain per key pair); min_ps(p, pmin) keeps pmin where p is NaN.
    __m512 pmin = _mm512_set1_ps(1.0f), pmin1 = pmin;
    int64_t n = 0;
    // Raw products (pass 1 only read them) get the scale here, rounded as the max was.
    const bool scaled = s.scale != 1.0f && !(cap || s.lo);
    if (s.pp) {  // P^T straight into bf16 key pairs (hi, and lo for 2 terms)
      const int64_t nk_p = rup(s.nk, 32), plane = nk_p * s.m, nk = s.nk, mp = s.mp, m = s.m;
      uint16_t* const pp = s.pp + m0 * 2;  // locals: stores through pp may alias s's fields
      const float* const st = col;
      // exponent = x c - m c (the comment at the top of this function): c folds the raw
      // products' scale and log2 e (1 in log2 units), one FMA per score.
      const __m512 c = s.log2_units ? pscale : _mm512_mul_ps(pscale, log2e);
      const __m512 mc = s.log2_units ? m_use : _mm512_mul_ps(m_use, log2e);
      auto p_of = [&](int64_t k) {
        return exp2_p(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(lanes, st + k * mp), c, mc));
      };
      if (s.terms == 1) {
        // Four keys per step, two independent pairs: the exp chains of one step overlap.
        for (; n + 4 <= nk; n += 4) {
          const __m512 p0 = p_of(n), p1 = p_of(n + 1), p2 = p_of(n + 2), p3 = p_of(n + 3);
          sum0 = _mm512_add_ps(sum0, _mm512_add_ps(p0, p2));
          sum1 = _mm512_add_ps(sum1, _mm512_add_ps(p1, p3));
          if (s.zero_p) {
            pmin = _mm512_min_ps(_mm512_min_ps(p0, p2), pmin);
            pmin1 = _mm512_min_ps(_mm512_min_ps(p1, p3), pmin1);
          }
          _mm512_mask_storeu_epi32(pp + n / 2 * m * 2, lanes, bf16_pairs(p0, p1));
          _mm512_mask_storeu_epi32(pp + (n / 2 + 1) * m * 2, lanes, bf16_pairs(p2, p3));
        }
      }
      for (; n < nk; n += 2) {
        const __m512 p0 = p_of(n);
        const __m512 p1 = n + 1 < nk ? p_of(n + 1) : _mm512_setzero_ps();
        sum0 = _mm512_add_ps(sum0, p0);
        sum1 = _mm512_add_ps(sum1, p1);
        pmin = _mm512_min_ps(p0, pmin);
        if (n + 1 < nk) pmin1 = _mm512_min_ps(p1, pmin1);
        const __m256i h0 = bf16_bits(p0), h1 = bf16_bits(p1);
        uint16_t* dst = pp + n / 2 * m * 2;
        _mm512_mask_storeu_epi32(dst, lanes, pair16(h0, h1));
        if (s.terms == 2)
          _mm512_mask_storeu_epi32(dst + plane, lanes, pair16(bf16_bits(_mm512_sub_ps(p0, bf16_widen(h0))),
                                                              bf16_bits(_mm512_sub_ps(p1, bf16_widen(h1)))));
      }
      for (int64_t j = (nk + 1) / 2; j < nk_p / 2; ++j)
        for (int tm = 0; tm < s.terms; ++tm)
          _mm512_mask_storeu_epi32(pp + tm * plane + j * m * 2, lanes, _mm512_setzero_si512());
    }
    // P^T back into st (fp32 products): the scale multiply only where the products are raw,
    // the min of P only where the driver asks (SoftmaxStep::zero_p); both are loop-invariant.
    // Scores in log2 units (SoftmaxStep::log2_units) need no log2(e) factor: s - m is the
    // exponent, exact where it matters (Sterbenz), where (s - m) log2 e rounds it once more
    // (~6e-8 relative: 6e-7 absolute at s - m = -10, half the fp32 output error).
    auto fp32_pass = [&](auto log2u, auto track_min) {
      auto arg2 = [&](int64_t k) {
        __m512 x = _mm512_maskz_loadu_ps(lanes, col + k * s.mp);
        if (scaled) x = _mm512_mul_round_ps(x, pscale, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if constexpr (decltype(log2u)::value) return _mm512_sub_ps(x, m_use);
        else return _mm512_mul_ps(_mm512_sub_ps(x, m_use), log2e);
      };
      for (; n + 2 <= s.nk; n += 2) {
        const __m512 p0 = exp2_512(arg2(n)), p1 = exp2_512(arg2(n + 1));
        _mm512_mask_storeu_ps(col + n * s.mp, lanes, p0);
        _mm512_mask_storeu_ps(col + (n + 1) * s.mp, lanes, p1);
        sum0 = _mm512_add_ps(sum0, p0);
        sum1 = _mm512_add_ps(sum1, p1);
        if constexpr (decltype(track_min)::value) pmin = _mm512_min_ps(p1, _mm512_min_ps(p0, pmin));
      }
      if (n < s.nk) {
        const __m512 p0 = exp2_512(arg2(n));
        _mm512_mask_storeu_ps(col + n * s.mp, lanes, p0);
        sum0 = _mm512_add_ps(sum0, p0);
        if constexpr (decltype(track_min)::value) pmin = _mm512_min_ps(p0, pmin);
      }
    };
    using yes = std::true_type;
    using no = std::false_type;
    if (s.log2_units) {
      if (s.zero_p) fp32_pass(yes{}, yes{});
      else fp32_pass(yes{}, no{});
    } else {
      if (s.zero_p) fp32_pass(no{}, yes{});
      else fp32_pass(no{}, no{});
    }
    pmin = _mm512_min_ps(pmin1, pmin);
    if (s.zero_p && _mm512_mask_cmp_ps_mask(lanes, pmin, _mm512_setzero_ps(), _CMP_EQ_OQ)) *s.zero_p = 1;
    const __m512 sum = _mm512_add_ps(sum0, sum1);
    if (check) {
      ext = (ext | _mm512_cmp_ps_mask(sum, sum, _CMP_UNORD_Q)) & lanes;
      for (int i = 0; i < 16; ++i)
        if (ext >> i & 1) s.redo[m0 + i] = 1;
    }
    const __m512 dm = _mm512_sub_ps(m_old, m_use);
    const __m512 a = exp2_512(s.log2_units ? dm : _mm512_mul_ps(dm, log2e));
    _mm512_mask_storeu_ps(s.alpha + m0, lanes, a);
    const __m512 l = _mm512_maskz_loadu_ps(lanes, s.l_run + m0);
    _mm512_mask_storeu_ps(s.l_run + m0, lanes, _mm512_fmadd_ps(l, a, sum));
    _mm512_mask_storeu_ps(s.m_run + m0, lanes, m_new);
  }
}

// ---------------------------------------------------------------------------------------------
// Packers for the 16-bit panels (layouts in cpu_kernels.h).


// 16 elements [c0, c0 + 16) of one row (lanes outside k read as 0) in fp32.
inline __m512 load_f32x16(const void* row, DType t, int64_t c0, __mmask16 k) {
  if (t == DType::bfloat16) return bf16_widen(_mm256_maskz_loadu_epi16(k, static_cast<const uint16_t*>(row) + c0));
  if (t == DType::float16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, static_cast<const uint16_t*>(row) + c0));
  if (t == DType::float8_e4m3) {
    // OCP e4m3fn -> fp32 (see cpu_kernels_avx2.cpp): magnitude bits << 20, times 2^120.
    const __m512i b = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, static_cast<const uint8_t*>(row) + c0));
    const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
    __m512 x = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(mag, 20)), _mm512_set1_ps(0x1p120f));
    x = _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f)), x,
                             _mm512_set1_ps(__builtin_nanf("")));
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(x), _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24)));
  }
  return _mm512_maskz_loadu_ps(k, static_cast<const float*>(row) + c0);  // float32
}

// 16 elements [c0, c0 + 16) of one row (lanes outside k read as 0) as bf16 hi (and lo for 2
// terms); flags gets kTiny / kNonFinite (bf16 subnormals are flushed by the products, so a tiny
// value is reported; cvtneps flushes fp32 subnormals itself, so those are looked for before).
inline void load_bf16(const void* row, DType t, int64_t c0, __mmask16 k, int terms, __m256i* hi, __m256i* lo,
                      __mmask16* tiny, __mmask16* nonfinite) {
  __m512 x;
  if (t == DType::bfloat16) {
    const __m256i h = _mm256_maskz_loadu_epi16(k, static_cast<const uint16_t*>(row) + c0);
    *hi = h;
    *lo = _mm256_setzero_si256();
    const __mmask16 exp_nz = _mm256_test_epi16_mask(h, _mm256_set1_epi16(0x7f80));
    *tiny |= ~exp_nz & _mm256_test_epi16_mask(h, _mm256_set1_epi16(0x7fff));
    *nonfinite |= _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7f80)), _mm256_set1_epi16(0x7f80));
    return;
  }
  x = load_f32x16(row, t, c0, k);
  *tiny |= _mm512_fpclass_ps_mask(x, 0x20);  // subnormal
  const __m256i h = bf16_bits(x);
  *hi = h;
  if (terms == 2) {
    const __m512 r = _mm512_sub_ps(x, bf16_widen(h));  // exact
    *tiny |= _mm512_fpclass_ps_mask(r, 0x20);
    *lo = bf16_bits(r);
  } else {
    *lo = _mm256_setzero_si256();
  }
  *nonfinite |= _mm512_fpclass_ps_mask(x, 0x99);  // NaN, +-inf
}


int flags_of(__mmask16 tiny, __mmask16 nonfinite) {
  return (tiny ? LowpKernels::kTiny : 0) | (nonfinite ? LowpKernels::kNonFinite : 0);
}

int pack_q_avx512(const float* qt, int64_t mp, int64_t dqk, int terms, uint16_t* qv) {
  const int64_t dqk_p = rup(dqk, 32), plane = dqk_p * mp;
  __mmask16 tiny = 0, nonfinite = 0;
  for (int64_t d2 = 0; d2 < dqk_p / 2; ++d2) {
    const int64_t a = 2 * d2, b = 2 * d2 + 1;
    uint16_t* dst = qv + d2 * mp * 2;
    for (int64_t i0 = 0; i0 < mp; i0 += 16) {
      const __mmask16 k = head_mask(mp - i0);
      __m256i ha = _mm256_setzero_si256(), la = ha, hb = ha, lb = ha;
      if (a < dqk) load_bf16(qt + a * mp, DType::float32, i0, k, terms, &ha, &la, &tiny, &nonfinite);
      if (b < dqk) load_bf16(qt + b * mp, DType::float32, i0, k, terms, &hb, &lb, &tiny, &nonfinite);
      _mm512_mask_storeu_epi32(dst + i0 * 2, k, pair16(ha, hb));
      if (terms == 2) _mm512_mask_storeu_epi32(dst + plane + i0 * 2, k, pair16(la, lb));
    }
  }
  return flags_of(tiny, 0);
}

// The packers for any input dtype, 16 elements per step through load_bf16: e4m3 (and fp32)
// rows, and the fallback of pack_q_rows_bf16; bf16 and fp16 rows take the faster ones below
// (pack_k_16, pack_v_16, pack_q_rows_bf16), which pack the same bits.
int pack_k_any(const void* const* krows, DType t, int64_t n, int64_t dqk, int terms, uint16_t* kb) {
  const int64_t dqk_p = rup(dqk, 32), nk_p = rup(n, 32), plane = nk_p * dqk_p;
  __mmask16 tiny = 0, nonfinite = 0;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c0 = 0; c0 < dqk_p; c0 += 16) {
      __m256i h = _mm256_setzero_si256(), l = h;
      if (c0 < dqk) load_bf16(krows[j], t, c0, head_mask(dqk - c0), terms, &h, &l, &tiny, &nonfinite);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(kb + j * dqk_p + c0), h);
      if (terms == 2) _mm256_storeu_si256(reinterpret_cast<__m256i*>(kb + plane + j * dqk_p + c0), l);
    }
  for (int tm = 0; tm < terms; ++tm)
    std::memset(kb + tm * plane + n * dqk_p, 0, static_cast<size_t>((nk_p - n) * dqk_p) * 2);
  return flags_of(tiny, nonfinite);
}

// The first two steps of a 16 x 16 dword transpose (r[i] = row i on entry): afterwards 128-bit
// lane L of r[4i + k] holds rows 4i .. 4i + 3 of column 4L + k.
inline void transpose16_dwords_qwords(__m512i r[16]) {
  __m512i t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
}

// In-register transpose of a 16 x 16 dword block (r[i] = row i on entry, column i on exit).
inline void transpose16(__m512i r[16]) {
  transpose16_dwords_qwords(r);
  // out row 4L + k, lane i = r[4i + k] lane L: a 4 x 4 transpose of 128-bit lanes per k.
  __m512i t[16];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512i x0 = _mm512_shuffle_i32x4(r[k], r[4 + k], 0x44), x1 = _mm512_shuffle_i32x4(r[k], r[4 + k], 0xee);
    const __m512i y0 = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0x44),
                  y1 = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0xee);
    t[k] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    t[4 + k] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
    t[8 + k] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    t[12 + k] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// qv straight from the Q rows (LowpKernels::pack_q_rows): per 16 rows x 32 dims, the row's
// bf16 (x pow2) in order are its 16 dim pairs, and one dword transpose makes them the 16 rows
// of each pair. Same roundings and kTiny reports as pack_q on Q^T x pow2, without the fp32
// row copies and the fp32 transpose (~8% of a bf16 prefill at S = 512 went to those).
int pack_q_rows_any(const void* const* qrows, DType t, int64_t n, int64_t mp, int64_t dqk, float pow2, int terms,
                    uint16_t* qv) {
  const int64_t dqk_p = rup(dqk, 32), plane = dqk_p * mp;
  const __m512 s = _mm512_set1_ps(pow2);
  __mmask16 tiny = 0;
  for (int64_t i0 = 0; i0 < mp; i0 += 16)
    for (int64_t c0 = 0; c0 < dqk_p; c0 += 32) {
      const __mmask16 ka = c0 < dqk ? head_mask(dqk - c0) : 0, kb = c0 + 16 < dqk ? head_mask(dqk - c0 - 16) : 0;
      __m512i h[16], l[16];
      for (int r = 0; r < 16; ++r) {
        h[r] = l[r] = _mm512_setzero_si512();
        if (i0 + r >= n) continue;
        const __m512 a = _mm512_mul_ps(s, load_f32x16(qrows[i0 + r], t, c0, ka));
        const __m512 b = _mm512_mul_ps(s, load_f32x16(qrows[i0 + r], t, c0 + 16, kb));
        tiny |= _mm512_fpclass_ps_mask(a, 0x20) | _mm512_fpclass_ps_mask(b, 0x20);  // subnormal
        h[r] = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // low half a, high half b: dims in order
        if (terms == 2) {
          const __m512 ra = _mm512_sub_ps(a, bf16_widen(_mm512_castsi512_si256(h[r])));  // exact
          const __m512 rb = _mm512_sub_ps(b, bf16_widen(_mm512_extracti64x4_epi64(h[r], 1)));
          tiny |= _mm512_fpclass_ps_mask(ra, 0x20) | _mm512_fpclass_ps_mask(rb, 0x20);
          l[r] = (__m512i)_mm512_cvtne2ps_pbh(rb, ra);
        }
      }
      transpose16(h);
      for (int k = 0; k < 16; ++k) _mm512_storeu_si512(qv + ((c0 / 2 + k) * mp + i0) * 2, h[k]);
      if (terms == 2) {
        transpose16(l);
        for (int k = 0; k < 16; ++k) _mm512_storeu_si512(qv + plane + ((c0 / 2 + k) * mp + i0) * 2, l[k]);
      }
    }
  return flags_of(tiny, 0);
}

// V^T panels, 32 keys x 16 dims at a time: dword (pair jj, dim e) = V[2jj][e] | V[2jj+1][e] << 16,
// transposed to dim-major rows of 16 pairs (= 32 keys, one AMX A row).
int pack_v_any(const void* const* vrows, DType t, int64_t n, int64_t dv, int terms, uint16_t* vt) {
  const int64_t dv_p = rup(dv, 16), nk_p = rup(n, 32), plane = dv_p * nk_p;
  __mmask16 tiny = 0, nonfinite = 0;
  for (int64_t j0 = 0; j0 < nk_p; j0 += 32)
    for (int64_t e0 = 0; e0 < dv_p; e0 += 16) {
      __m512i wh[16], wl[16];
      const __mmask16 k = head_mask(dv - e0);
      for (int jj = 0; jj < 16; ++jj) {
        const int64_t a = j0 + 2 * jj, b = a + 1;
        __m256i ha = _mm256_setzero_si256(), la = ha, hb = ha, lb = ha;
        if (a < n) load_bf16(vrows[a], t, e0, k, terms, &ha, &la, &tiny, &nonfinite);
        if (b < n) load_bf16(vrows[b], t, e0, k, terms, &hb, &lb, &tiny, &nonfinite);
        wh[jj] = pair16(ha, hb);
        wl[jj] = pair16(la, lb);
      }
      transpose16(wh);
      for (int ee = 0; ee < 16; ++ee) _mm512_storeu_si512(vt + (e0 + ee) * nk_p + j0, wh[ee]);
      if (terms == 2) {
        transpose16(wl);
        for (int ee = 0; ee < 16; ++ee) _mm512_storeu_si512(vt + plane + (e0 + ee) * nk_p + j0, wl[ee]);
      }
    }
  return flags_of(tiny, nonfinite);
}

// ---------------------------------------------------------------------------------------------
// Packers for bf16 and fp16 rows: the AMX path's per-call packing (K / V panels once per key
// tile, Q once per work unit), which profiles put at 13-19% of a bf16 call. Same panels and
// flags as the *_any packers above, bit for bit (bench/cpu_pack_bench.cpp check compares two
// builds), with fewer instructions per byte:
//   - 32 elements (a 64-byte piece of a row) per load and per store, not 16;
//   - the kTiny / kNonFinite scan in vector accumulators (and, sub, min, max per 32 bf16: no
//     mask compares and mask ORs per 16 elements), reduced once per call;
//   - V^T as a plain 16-bit transpose (a panel row of 32 keys in VNNI pairs is the 32 keys of
//     that dim in order) of 32 x 32 blocks: vpunpck{l,h}wd pairs the keys, two dword 16 x 16
//     transposes do the rest, and their last step (128-bit lanes across registers) is left to
//     the stores, which write each panel row as two 32-byte halves;
//   - Q from bf16 rows times the power of two 2^k as an add of k to the exponent field;
//   - software prefetch of the source rows (one kv head of many: rows pages apart). Not of the
//     panel lines about to be written: that made pack_k / pack_v ~15% faster alone on one
//     thread from L3, but slower inside the call (2 threads: pack_k's share of a bf16 S 512
//     D 256 profile 2.2-3.3% -> 5.5-5.9%).
// Time against the *_any packers (bench/cpu_pack_bench.cpp, one thread, D 64-256), bf16 pack_k /
// pack_v / pack_q_rows: 0.5-0.7 / 0.65-0.75 / 0.55x in L2, 0.75-0.9 / 0.75-0.85 / 0.45-0.7x from
// L3; fp16 pack_k 0.5x / 0.75-0.85x, pack_v 0.9-1.0x (the hi / lo split, not the transpose,
// dominates it). From L3 the packers wait on memory, so a bf16 call gains ~1% (bench/cpu_ab.py).

// The cache lines of one storage row of d elements, toward L1 (the packers read rows that may be
// a page apart each: one kv head of many, or pages; the hardware prefetcher does not follow).
inline void prefetch_row(const void* row, DType t, int64_t d) {
  const int64_t bytes = d * (t == DType::float32 ? 4 : t == DType::float8_e4m3 ? 1 : 2);
  const char* p = static_cast<const char*>(row);
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
  _mm_prefetch(p + bytes - 1, _MM_HINT_T0);
}

// The 64 bytes at p (one or two cache lines), toward L1.
inline void prefetch64(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
  _mm_prefetch(static_cast<const char*>(p) + 63, _MM_HINT_T0);
}

// Mask of the first k of 32 lanes.
inline __mmask32 head_mask32(int64_t k) {
  return k >= 32 ? ~__mmask32(0) : k <= 0 ? __mmask32(0) : (__mmask32(1) << k) - 1;
}

// The 32 16-bit elements [c0, c0 + 32) of a row of d, 0 from d on (a plain load when all 32
// are inside: a masked load costs an ALU uop on top).
inline __m512i load_w32(const uint16_t* row, int64_t c0, int64_t d) {
  if (c0 + 32 <= d) return _mm512_loadu_si512(row + c0);
  if (c0 >= d) return _mm512_setzero_si512();
  return _mm512_maskz_loadu_epi16(head_mask32(d - c0), row + c0);
}

// kTiny / kNonFinite of bf16 bit patterns, 32 per add, reduced by flags(): with |x| = x & 0x7fff,
// inf / NaN are |x| >= 0x7f80 (the max), a nonzero subnormal is |x| - 1 < 0x7f unsigned (the
// min; |x| = 0 wraps to 0xffff and drops out). load_bf16's tests, in two registers.
struct ScanBf16 {
  __m512i top = _mm512_setzero_si512();    // max |x|
  __m512i low = _mm512_set1_epi16(-1);     // min |x| - 1
  void add(__m512i h) {
    const __m512i a = _mm512_and_si512(h, _mm512_set1_epi16(0x7fff));
    top = _mm512_max_epu16(top, a);
    low = _mm512_min_epu16(low, _mm512_sub_epi16(a, _mm512_set1_epi16(1)));
  }
  int flags() const {
    return (_mm512_cmplt_epu16_mask(low, _mm512_set1_epi16(0x7f)) ? LowpKernels::kTiny : 0) |
           (_mm512_cmpge_epu16_mask(top, _mm512_set1_epi16(0x7f80)) ? LowpKernels::kNonFinite : 0);
  }
};

// kNonFinite of fp16 bit patterns (|x| >= 0x7c00). fp16 rows never set kTiny: an fp16 value
// and its remainder x - bf16(x) are 0 or at least 2^-24, normal in fp32 and bf16, so
// load_bf16's subnormal tests never fire on them.
struct ScanF16 {
  __m512i top = _mm512_setzero_si512();
  void add(__m512i h) { top = _mm512_max_epu16(top, _mm512_and_si512(h, _mm512_set1_epi16(0x7fff))); }
  int flags() const {
    return _mm512_cmpge_epu16_mask(top, _mm512_set1_epi16(0x7c00)) ? LowpKernels::kNonFinite : 0;
  }
};

// 32 fp16 -> bf16 hi = bf16(x) and lo = bf16(x - hi) (x = hi + lo exactly), in element order:
// load_bf16's arithmetic, two 16-lane halves per instruction pair.
inline void split_f16(__m512i h, __m512i* hi, __m512i* lo) {
  const __m512 x0 = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  const __m512 x1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
  const __m512i b = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);  // low half x0, high half x1
  *hi = b;
  *lo = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(x1, bf16_widen(_mm512_extracti64x4_epi64(b, 1))),
                                     _mm512_sub_ps(x0, bf16_widen(_mm512_castsi512_si256(b))));
}

// transpose16 (16 x 16 dwords, r[i] = row i) whose output row p goes to memory at row(p)
// (nullptr: not stored). Its last step, a 4 x 4 transpose of 128-bit lanes across registers, is
// half done by the stores: output row p = [A B C D] (lanes of four registers) is stored as
// [A B] and [C D], 32 bytes each, from registers that pair two rows' halves ([A B | A' B']):
// 4 vpermt2q per 4 rows where transpose16 spends 8 shuffles. Shuffles (port 5) bound the
// packers; an upper-half store (vextracti64x4 to memory) is a plain store.
template <class Row>
inline void transpose16_store(__m512i r[16], Row row) {
  transpose16_dwords_qwords(r);
  // Now 128-bit lane L of r[4i + k] holds rows 4i .. 4i + 3 of column 4L + k: output row
  // 4L + k = lane L of (r[k], r[4 + k], r[8 + k], r[12 + k]).
  const __m512i lanes01 = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);    // [a.0 b.0 | a.1 b.1]
  const __m512i lanes23 = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);  // [a.2 b.2 | a.3 b.3]
  auto store = [&](int p, __m256i ab, __m256i cd) {
    if (uint16_t* dst = row(p)) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), ab);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16), cd);
    }
  };
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512i x01 = _mm512_permutex2var_epi64(r[k], lanes01, r[4 + k]);
    const __m512i y01 = _mm512_permutex2var_epi64(r[8 + k], lanes01, r[12 + k]);
    const __m512i x23 = _mm512_permutex2var_epi64(r[k], lanes23, r[4 + k]);
    const __m512i y23 = _mm512_permutex2var_epi64(r[8 + k], lanes23, r[12 + k]);
    store(k, _mm512_castsi512_si256(x01), _mm512_castsi512_si256(y01));
    store(4 + k, _mm512_extracti64x4_epi64(x01, 1), _mm512_extracti64x4_epi64(y01, 1));
    store(8 + k, _mm512_castsi512_si256(x23), _mm512_castsi512_si256(y23));
    store(12 + k, _mm512_extracti64x4_epi64(x23, 1), _mm512_extracti64x4_epi64(y23, 1));
  }
}

// K panel rows from bf16 (F16 = false: a copy, zero-padded to dqk_p) or fp16 rows (hi and lo
// planes).
template <bool F16>
int pack_k_16(const void* const* krows, int64_t n, int64_t dqk, int terms, uint16_t* kb) {
  const int64_t dqk_p = rup(dqk, 32), nk_p = rup(n, 32), plane = nk_p * dqk_p;
  std::conditional_t<F16, ScanF16, ScanBf16> scan;
  for (int64_t j = 0; j < n; ++j) {
    // Source rows may be pages apart (one kv head of many): 8 rows ahead.
    if (j + 8 < n) prefetch_row(krows[j + 8], DType::bfloat16, dqk);  // 2-byte elements either way
    const uint16_t* src = static_cast<const uint16_t*>(krows[j]);
    uint16_t* dst = kb + j * dqk_p;
    for (int64_t c0 = 0; c0 < dqk_p; c0 += 32) {
      const __m512i h = load_w32(src, c0, dqk);
      scan.add(h);
      if constexpr (F16) {
        __m512i hi, lo;
        split_f16(h, &hi, &lo);
        _mm512_storeu_si512(dst + c0, hi);
        if (terms == 2) _mm512_storeu_si512(dst + plane + c0, lo);
      } else {
        _mm512_storeu_si512(dst + c0, h);
      }
    }
  }
  for (int tm = 0; tm < terms; ++tm)
    std::memset(kb + tm * plane + n * dqk_p, 0, static_cast<size_t>((nk_p - n) * dqk_p) * 2);
  return scan.flags();
}

// One 32-key x 32-dim block of V^T: load(i) = the 32 dims of key i (bf16 bits), scan(x) sees
// each once; the panel row of dim d (32 keys = 16 VNNI pairs, one AMX A row) goes to dst(d).
// vpunpcklwd of keys 2i, 2i + 1 gives the dwords (key 2i | key 2i + 1 << 16) of dims 8L + 0..3 in
// 128-bit lane L (dword 4L + q: dim 8L + q), vpunpckhwd those of dims 8L + 4..7; a dword
// transpose of the 16 pairs then makes each dim's row. One half after the other, the rows
// reloaded (from L1) for the second: 16 registers per half, no spills.
template <class Load, class Scan, class Dst>
inline void vt_block(Load load, Scan scan, Dst dst) {
  __m512i r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    const __m512i a = load(2 * i), b = load(2 * i + 1);
    scan(a);
    scan(b);
    r[i] = _mm512_unpacklo_epi16(a, b);
  }
  transpose16_store(r, [&](int p) { return dst(8 * (p >> 2) + (p & 3)); });
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_unpackhi_epi16(load(2 * i), load(2 * i + 1));
  transpose16_store(r, [&](int p) { return dst(8 * (p >> 2) + 4 + (p & 3)); });
}

// V^T panels from bf16 or fp16 rows, 32 keys x 32 dims per vt_block. fp16: each block's rows
// are split into hi and lo once, into an L1 stash that the two vt_block calls read.
template <bool F16>
int pack_v_16(const void* const* vrows, int64_t n, int64_t dv, int terms, uint16_t* vt) {
  const int64_t dv_p = rup(dv, 16), nk_p = rup(n, 32), plane = dv_p * nk_p;
  std::conditional_t<F16, ScanF16, ScanBf16> scan;
  alignas(64) uint16_t stash[F16 ? 2 : 1][32][32];
  for (int64_t j0 = 0; j0 < nk_p; j0 += 32) {
    const uint16_t* row[32];  // nullptr: keys n .. nk_p, zero
    for (int i = 0; i < 32; ++i) row[i] = j0 + i < n ? static_cast<const uint16_t*>(vrows[j0 + i]) : nullptr;
    const int64_t next = std::min<int64_t>(32, n - j0 - 32);  // keys of the next block (<= 0: none)
    for (int64_t e0 = 0; e0 < dv_p; e0 += 32) {
      // The next block's rows, piece by piece (rows may be pages apart: one kv head of many).
      if (e0 < dv)
        for (int i = 0; i < next; ++i) prefetch64(static_cast<const uint16_t*>(vrows[j0 + 32 + i]) + e0);
      auto load = [&](int i) { return row[i] ? load_w32(row[i], e0, dv) : _mm512_setzero_si512(); };
      auto dst = [&](int64_t off) {  // dims past dv_p (dv_p - e0 = 16) are not panel rows
        return [=](int d) { return e0 + d < dv_p ? vt + off + (e0 + d) * nk_p + j0 : nullptr; };
      };
      if constexpr (F16) {
        for (int i = 0; i < 32; ++i) {
          const __m512i h = load(i);
          scan.add(h);
          __m512i hi, lo;
          split_f16(h, &hi, &lo);
          _mm512_store_si512(stash[0][i], hi);
          _mm512_store_si512(stash[1][i], lo);
        }
        auto none = [](__m512i) {};
        for (int tm = 0; tm < terms; ++tm)
          vt_block([&](int i) { return _mm512_load_si512(stash[tm][i]); }, none, dst(tm * plane));
      } else {
        vt_block(load, [&](__m512i h) { scan.add(h); }, dst(0));
      }
    }
  }
  return scan.flags();
}

// qv from bf16 rows times pow2 = 2^k. Multiplying by 2^k adds k to the exponent field: where x
// and x 2^k are normal numbers the product's bits are x + (k << 7) (what the fp32 path gets:
// the multiply is exact and cvtneps leaves a bf16-exact value as is, no kTiny), and +-0 stays.
// So Q is packed that way, checking along that every nonzero |x| lies in [lo, hi] (both x and
// x 2^k normal); where one does not (a bf16 subnormal, inf / NaN, or a product outside the
// normal range: rare) pack_q_rows_any packs Q again, with its flags. The dims of 16 rows, 32 at
// a time, are 16 dword pairs per row as loaded: one dword transpose makes the 16 pair rows.
int pack_q_rows_bf16(const void* const* qrows, int64_t n, int64_t mp, int64_t dqk, float pow2, uint16_t* qv) {
  uint32_t u;
  std::memcpy(&u, &pow2, 4);
  const int e = static_cast<int>(u >> 23);  // biased exponent (sign 0 for a positive power of two)
  if ((u & 0x807fffff) != 0 || e == 0 || e == 255)
    return pack_q_rows_any(qrows, DType::bfloat16, n, mp, dqk, pow2, 1, qv);
  const int k = e - 127, lo = std::max(0x80, 0x80 - 128 * k), hi = std::min(0x7f7f, 0x7f7f - 128 * k);
  if (lo > hi) return pack_q_rows_any(qrows, DType::bfloat16, n, mp, dqk, pow2, 1, qv);
  // Range check on 2|x| = x + x (the sign shifted out): the largest 2|x| - 2 lo (16-bit,
  // unsigned) of the nonzero lanes is at most 2 (hi - lo) iff all are in range (a |x| below lo
  // wraps to 2^16 - 2 (lo - |x|), above 2 (hi - lo) as hi < 2^15).
  const __m512i add = _mm512_set1_epi16(static_cast<int16_t>(k * 128));
  const __m512i lo2 = _mm512_set1_epi16(static_cast<int16_t>(2 * lo));
  __m512i worst = _mm512_setzero_si512();
  const int64_t dqk_p = rup(dqk, 32);
  for (int64_t i0 = 0; i0 < mp; i0 += 16)
    for (int64_t c0 = 0; c0 < dqk_p; c0 += 32) {
      if (c0 < dqk)  // the next 16 rows, piece by piece
        for (int64_t i = i0 + 16; i < std::min(n, i0 + 32); ++i)
          prefetch64(static_cast<const uint16_t*>(qrows[i]) + c0);
      __m512i r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        if (i0 + i >= n) {
          r[i] = _mm512_setzero_si512();
          continue;
        }
        const __m512i h = load_w32(static_cast<const uint16_t*>(qrows[i0 + i]), c0, dqk);
        const __mmask32 nz = _mm512_test_epi16_mask(h, _mm512_set1_epi16(0x7fff));
        worst = _mm512_max_epu16(worst, _mm512_maskz_sub_epi16(nz, _mm512_add_epi16(h, h), lo2));
        r[i] = _mm512_mask_add_epi16(h, nz, h, add);
      }
      transpose16_store(r, [&](int p) { return qv + ((c0 / 2 + p) * mp + i0) * 2; });
    }
  if (_mm512_cmpgt_epu16_mask(worst, _mm512_set1_epi16(static_cast<int16_t>(2 * (hi - lo)))))
    return pack_q_rows_any(qrows, DType::bfloat16, n, mp, dqk, pow2, 1, qv);
  return 0;
}

// The LowpKernels entries: bf16 and fp16 rows on the packers above, the rest on the *_any ones.
int pack_k_avx512(const void* const* krows, DType t, int64_t n, int64_t dqk, int terms, uint16_t* kb) {
  if (t == DType::bfloat16 && terms == 1) return pack_k_16<false>(krows, n, dqk, terms, kb);
  if (t == DType::float16) return pack_k_16<true>(krows, n, dqk, terms, kb);
  return pack_k_any(krows, t, n, dqk, terms, kb);
}

int pack_v_avx512(const void* const* vrows, DType t, int64_t n, int64_t dv, int terms, uint16_t* vt) {
  if (t == DType::bfloat16 && terms == 1) return pack_v_16<false>(vrows, n, dv, terms, vt);
  if (t == DType::float16) return pack_v_16<true>(vrows, n, dv, terms, vt);
  return pack_v_any(vrows, t, n, dv, terms, vt);
}

int pack_q_rows_avx512(const void* const* qrows, DType t, int64_t n, int64_t mp, int64_t dqk, float pow2, int terms,
                       uint16_t* qv) {
  if (t == DType::bfloat16 && terms == 1) return pack_q_rows_bf16(qrows, n, mp, dqk, pow2, qv);
  return pack_q_rows_any(qrows, t, n, mp, dqk, pow2, terms, qv);
}

// ---------------------------------------------------------------------------------------------
// fp32 panel products (F32Panels, cpu_kernels.h): the micro-kernels above with K / V broadcast
// from contiguous 8-element runs of packed panels and long key tiles. Measured in isolation (one
// core, D = 128, 192 query rows, in cache; the machine's FMA peak ~150-165 GFLOP/s): qk 155-165,
// pv 127 / 144 / 155 GFLOP/s at 32 / 64 / 128 keys per tile (the O^T block's load, rescale and
// store are paid once per tile), where the row-pointer kernels ran qk ~107, pv ~95-103 on
// rows copied per query tile.

// K panel: 16 keys x 16 dims per step through transpose16; block b gets the low 8 lanes of each
// transposed dim, block b + 1 the high 8.
void pack_k_f32(const void* const* krows, DType t, int64_t n, int64_t dqk, float* kp) {
  const int64_t nb = (n + 7) / 8;
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    for (int64_t j = j0 + 16; j < std::min(n, j0 + 32); ++j) prefetch_row(krows[j], t, dqk);
    const int64_t b = j0 / 8;
    float* lo = kp + b * dqk * 8;
    float* hi = b + 1 < nb ? lo + dqk * 8 : nullptr;
    for (int64_t c0 = 0; c0 < dqk; c0 += 16) {
      const __mmask16 k = head_mask(dqk - c0);
      const int64_t nd = std::min<int64_t>(16, dqk - c0);
      __m512i r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        r[i] = j0 + i < n ? _mm512_castps_si512(load_f32x16(krows[j0 + i], t, c0, k)) : _mm512_setzero_si512();
      transpose16(r);
      for (int64_t d = 0; d < nd; ++d) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + (c0 + d) * 8), _mm512_castsi512_si256(r[d]));
        if (hi) _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + (c0 + d) * 8), _mm512_extracti64x4_epi64(r[d], 1));
      }
    }
  }
}

// V panel: each row's 16-dim pieces split into two 8-dim blocks.
int pack_v_f32(const void* const* vrows, DType t, int64_t n, int64_t ld, int64_t dv, float* vp) {
  const int64_t nb = (dv + 7) / 8;
  __mmask16 nonfinite = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (j + 8 < n) prefetch_row(vrows[j + 8], t, dv);
    for (int64_t c0 = 0; c0 < dv; c0 += 16) {
      const __m512 x = load_f32x16(vrows[j], t, c0, head_mask(dv - c0));
      nonfinite |= _mm512_fpclass_ps_mask(x, 0x99);  // NaN, +-inf
      const int64_t b = c0 / 8;
      _mm256_storeu_ps(vp + (b * ld + j) * 8, _mm512_castps512_ps256(x));
      if (b + 1 < nb) _mm256_storeu_ps(vp + ((b + 1) * ld + j) * 8, _mm512_extractf32x8_ps(x, 1));
    }
  }
  return flags_of(0, nonfinite);
}

// The register block of both products, from 0: c[n][v] = sum_{k < kn} b[8 k + n] a[k lda + 16 v]
// (b: a panel block, 8 elements per step; a: MV vectors of Q^T or P^T per step).
template <int MV>
inline void outer8(__m512 (&c)[8][MV], const float* a, int64_t lda, const float* b, int64_t kn) {
#pragma GCC unroll 8
  for (int n = 0; n < 8; ++n)
#pragma GCC unroll 3
    for (int v = 0; v < MV; ++v) c[n][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kn; ++k) {
    __m512 x[MV];
#pragma GCC unroll 3
    for (int v = 0; v < MV; ++v) x[v] = _mm512_loadu_ps(a + k * lda + 16 * v);
#pragma GCC unroll 8
    for (int n = 0; n < 8; ++n) {
      const __m512 bc = _mm512_set1_ps(b[k * 8 + n]);
#pragma GCC unroll 3
      for (int v = 0; v < MV; ++v) c[n][v] = _mm512_fmadd_ps(bc, x[v], c[n][v]);
    }
  }
}

// S^T block: keys [0, 8) of one K block x queries [0, 16 MV), over d, in chunks of dims each
// summed from 0 and then added to the block's sum in st (a two-level sum, as pvp_block's over
// keys): a dot product carried through all d dims in one FMA chain has a rounding error that grows
// with d (partial sums of ~sqrt(k) |q| |k| for k = 1 .. d), and fp32 attention's output error
// follows the scores' (p = 2^s). Measured against fp64 (bench/cpu_peers.py --acc-seeds, normal
// inputs, S 512 / 2048, 8 seeds, docs/perf/cpu.md, branch cpu16-gaps): one chain gave rel-L2
// 3.6 / 4.4 / 5.9e-7 at D 64 / 128 / 256, above torch 2.15's CPU SDPA at D 256 (4.0e-7) in
// every seed; chunks of 64 dims (32 at D <= 64): 2.8-3.3e-7 at every D (0.69-0.77x torch's),
// for 0-3% of the fp32 prefill time (a load, add and store per accumulator per chunk: S 2048
// 1.00x, S 512 D 256 0.97x; chunks of 32 at D 128 / 256 cost 1.6-2.2%).
template <int MV>
inline void qkp_block(const float* qt, int64_t mp, int64_t d, const float* kb, float* st) {
  const int64_t chunk = d <= 64 ? 32 : 64;
  __m512 c[8][MV];
  outer8<MV>(c, qt, mp, kb, std::min(d, chunk));
#pragma GCC unroll 8
  for (int n = 0; n < 8; ++n)
#pragma GCC unroll 3
    for (int v = 0; v < MV; ++v) _mm512_storeu_ps(st + n * mp + 16 * v, c[n][v]);
  for (int64_t d0 = chunk; d0 < d; d0 += chunk) {
    outer8<MV>(c, qt + d0 * mp, mp, kb + d0 * 8, std::min(chunk, d - d0));
#pragma GCC unroll 8
    for (int n = 0; n < 8; ++n)
#pragma GCC unroll 3
      for (int v = 0; v < MV; ++v)
        _mm512_storeu_ps(st + n * mp + 16 * v, _mm512_add_ps(_mm512_loadu_ps(st + n * mp + 16 * v), c[n][v]));
  }
}

template <int MV>
void qkp_strip(const float* qt, int64_t mp, int64_t d, const float* kp, int64_t n, float* st) {
  for (int64_t n0 = 0; n0 < n; n0 += 8) qkp_block<MV>(qt, mp, d, kp + n0 * d, st + n0 * mp);
}

// Strips of 48 queries (the last one 32 or 16): each strip's Q^T stays in L1 while the K panel
// streams past it.
void qk_f32p(const float* qt, int64_t mp, int64_t m, int64_t dqk, const float* kp, int64_t n, float* st) {
  int64_t m0 = 0;
  for (; m0 + 48 <= m; m0 += 48) qkp_strip<3>(qt + m0, mp, dqk, kp, n, st + m0);
  if (m - m0 == 32) qkp_strip<2>(qt + m0, mp, dqk, kp, n, st + m0);
  if (m - m0 == 16) qkp_strip<1>(qt + m0, mp, dqk, kp, n, st + m0);
}

// O^T block: dims [0, 8) of one V block x queries [0, 16 MV), rescaled by alpha, over n keys.
// The tile's sum starts from 0 and meets alpha O once at the end (one FMA): a two-level sum,
// whose rounding grows with sqrt(keys per tile), not sqrt(keys) -- rel-L2 against fp64 at
// S = 2048 was 9e-7 with O carried through every key (torch's 512-key GEMM blocks: 4-5e-7).
template <int MV>
inline void pvp_block(const float* pt, int64_t mp, int64_t n, const float* vb, const float* alpha, float* ot) {
  __m512 c[8][MV];
  outer8<MV>(c, pt, mp, vb, n);
  __m512 a[MV];
#pragma GCC unroll 3
  for (int v = 0; v < MV; ++v) a[v] = _mm512_loadu_ps(alpha + 16 * v);
#pragma GCC unroll 8
  for (int e = 0; e < 8; ++e)
#pragma GCC unroll 3
    for (int v = 0; v < MV; ++v)
      _mm512_storeu_ps(ot + e * mp + 16 * v, _mm512_fmadd_ps(a[v], _mm512_loadu_ps(ot + e * mp + 16 * v), c[e][v]));
}

template <int MV>
void pvp_strip(const float* pt, int64_t mp, int64_t n, const float* vp, int64_t ld, int64_t dv, const float* alpha,
               float* ot) {
  for (int64_t e0 = 0; e0 < dv; e0 += 8) pvp_block<MV>(pt, mp, n, vp + e0 * ld, alpha, ot + e0 * mp);
}

// Strips of 48 queries: each strip's P^T stays in L1 while the V panel streams past it.
void pv_f32p(const float* pt, int64_t mp, int64_t m, int64_t n, const float* vp, int64_t ld, int64_t dv,
             const float* alpha, float* ot) {
  int64_t m0 = 0;
  for (; m0 + 48 <= m; m0 += 48) pvp_strip<3>(pt + m0, mp, n, vp, ld, dv, alpha + m0, ot + m0);
  if (m - m0 == 32) pvp_strip<2>(pt + m0, mp, n, vp, ld, dv, alpha + m0, ot + m0);
  if (m - m0 == 16) pvp_strip<1>(pt + m0, mp, n, vp, ld, dv, alpha + m0, ot + m0);
}

}  // namespace

// P^T pairs for the second product (shared with the AMX table through avx512_lowp's pv): pp
// [T][nk_p/2][m][2] from st rows [0, n) (rows n .. nk_p read as 0).
void pack_p_avx512(const float* st, int64_t mp, int64_t m, int64_t n, int terms, uint16_t* pp) {
  const int64_t nk_p = rup(n, 32), plane = nk_p * m;
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t j = 0; j < nk_p / 2; ++j) {
    const int64_t a = 2 * j, b = a + 1;
    uint16_t* dst = pp + j * m * 2;
    for (int64_t i0 = 0; i0 < m; i0 += 16) {
      const __m512 xa = a < n ? _mm512_loadu_ps(st + a * mp + i0) : zero;
      const __m512 xb = b < n ? _mm512_loadu_ps(st + b * mp + i0) : zero;
      const __m256i ha = bf16_bits(xa), hb = bf16_bits(xb);
      _mm512_storeu_si512(dst + i0 * 2, pair16(ha, hb));
      if (terms == 2) {
        const __m256i la = bf16_bits(_mm512_sub_ps(xa, bf16_widen(ha))), lb = bf16_bits(_mm512_sub_ps(xb, bf16_widen(hb)));
        _mm512_storeu_si512(dst + plane + i0 * 2, pair16(la, lb));
      }
    }
  }
}

// ot[e][i] *= alpha[i] for e < rows, i < m; blocks of 16 queries whose alpha are all 1 are left.
void rescale_ot_avx512(float* ot, int64_t mp, int64_t m, int64_t rows, const float* alpha) {
  for (int64_t i0 = 0; i0 < m; i0 += 16) {
    const __m512 a = _mm512_loadu_ps(alpha + i0);
    if (_mm512_cmp_ps_mask(a, _mm512_set1_ps(1.0f), _CMP_NEQ_UQ) == 0) continue;
    for (int64_t e = 0; e < rows; ++e) _mm512_storeu_ps(ot + e * mp + i0, _mm512_mul_ps(a, _mm512_loadu_ps(ot + e * mp + i0)));
  }
}

namespace {

// dst[j][i] = src[i][j] * scale * col_scale[j]: 16 x 16 blocks through transpose16, edges masked.
void transpose_avx512(const float* src, int64_t ld_src, int64_t nr, int64_t nc, const float* col_scale, float scale,
                      float* dst, int64_t ld_dst) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t i0 = 0; i0 < nr; i0 += 16) {
    const int64_t ni = std::min<int64_t>(16, nr - i0);
    const __mmask16 si = head_mask(ni);
    for (int64_t j0 = 0; j0 < nc; j0 += 16) {
      const int64_t nj = std::min<int64_t>(16, nc - j0);
      const __mmask16 sj = head_mask(nj);
      const __m512 cs = col_scale ? _mm512_mul_ps(sc, _mm512_maskz_loadu_ps(sj, col_scale + j0)) : sc;
      // The same columns of the next 16 source rows, one block row ahead: Q rows straight from
      // storage are a page apart each (BSHD), where the hardware prefetcher does not follow.
      for (int64_t i = 0; i < std::min<int64_t>(16, nr - i0 - 16); ++i)
        _mm_prefetch(reinterpret_cast<const char*>(src + (i0 + 16 + i) * ld_src + j0), _MM_HINT_T0);
      __m512i r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        r[i] = i < ni ? _mm512_castps_si512(_mm512_mul_ps(cs, _mm512_maskz_loadu_ps(sj, src + (i0 + i) * ld_src + j0)))
                      : _mm512_setzero_si512();
      transpose16(r);
      for (int64_t j = 0; j < nj; ++j) _mm512_mask_storeu_ps(dst + (j0 + j) * ld_dst + i0, si, _mm512_castsi512_ps(r[j]));
    }
  }
}

// 16 fp32 -> bf16 bits in the low half of each dword: store_f32's rounding (round to nearest
// even on the bits, NaN -> quiet, subnormals kept; vcvtneps2bf16 would flush them).
inline __m512i bf16_round_bits(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
}

// bf16_round_bits with the result in the high word of each dword (the low word is garbage).
inline __m512i bf16_round_hi(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
}

// Kernels::transpose_store16: O^T [dv][mp] (fp32) -> 16-bit output rows, row r at dst + r * step
// elements: dst[r][e] = t(ot[e][r] * col_scale[r]). Per 16 rows x 32 dims, two 16 x 16
// transposes and one 64-byte store per row. Replaces transpose (into an fp32 row buffer) +
// store_row per row, and the driver's non-finite scan of O^T: one pass over O^T. bf16 rounds
// first and pairs two dims per dword, so one transpose per 32 dims. Measured and not kept (one
// thread, S 512 D 256, BSHD output): prefetchw / prefetcht0 of the next 16 output rows
// meanwhile, or of all rows first (no faster); staging 16 rows x 256 dims in L1 and writing each
// row's 512 bytes in order (finish 17k -> 25k cycles).
bool transpose_store16_avx512(const float* ot, int64_t mp, int64_t dv, int64_t rows, const float* col_scale, DType t,
                              void* dst, int64_t step) {
  const __m512i abs_bits = _mm512_set1_epi32(0x7fffffff);
  __m512i top = _mm512_setzero_si512();  // max |bits| of the O^T values read: >= 0x7f800000 = inf / NaN
  uint16_t* const out = static_cast<uint16_t*>(dst);
  const bool f16 = t == DType::float16;
  // word j of the result: word 2j of (a, b) (the low words of a's dwords, then of b's)
  const __m512i even_words = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28,
                                              26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  for (int64_t i0 = 0; i0 < rows; i0 += 16) {
    const int64_t ni = std::min<int64_t>(16, rows - i0);
    const __mmask16 si = head_mask(ni);
    const __m512 cs = _mm512_maskz_loadu_ps(si, col_scale + i0);
    for (int64_t e0 = 0; e0 < dv; e0 += 32) {
      __m512i a[16], b[16];
      auto load = [&](int64_t e) {
        if (e >= dv) return _mm512_setzero_si512();
        const __m512 x = _mm512_maskz_loadu_ps(si, ot + e * mp + i0);
        top = _mm512_max_epu32(top, _mm512_and_si512(_mm512_castps_si512(x), abs_bits));
        return _mm512_castps_si512(_mm512_mul_ps(cs, x));
      };
      if (!f16 && e0 + 32 <= dv) {
        // bf16: round first, two dims per dword (dim e0 + 2k low, e0 + 2k + 1 high, as in
        // memory), and one transpose of the 16 pairs x 16 rows gives each row's 64 bytes.
#pragma GCC unroll 16
        for (int k = 0; k < 16; ++k) {
          const __m512i lo = bf16_round_bits(_mm512_castsi512_ps(load(e0 + 2 * k)));
          const __m512i hi = bf16_round_hi(_mm512_castsi512_ps(load(e0 + 2 * k + 1)));
          a[k] = _mm512_ternarylogic_epi32(lo, hi, _mm512_set1_epi32(static_cast<int>(0xffff0000u)), 0xf8);  // lo | (hi & c)
        }
        transpose16_store(a, [&](int p) { return p < ni ? out + (i0 + p) * step + e0 : nullptr; });
        continue;
      }
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) a[k] = load(e0 + k);
      transpose16(a);
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) b[k] = load(e0 + 16 + k);
      transpose16(b);
      const __mmask32 se = head_mask32(dv - e0);
      for (int64_t i = 0; i < ni; ++i) {
        uint16_t* o = out + (i0 + i) * step + e0;
        __m512i w;
        if (f16) {
          w = _mm512_inserti64x4(
              _mm512_castsi256_si512(_mm512_cvtps_ph(_mm512_castsi512_ps(a[i]), _MM_FROUND_TO_NEAREST_INT)),
              _mm512_cvtps_ph(_mm512_castsi512_ps(b[i]), _MM_FROUND_TO_NEAREST_INT), 1);
        } else {
          // the rounded bits sit in the low word of each dword: words 0, 2, .. of a then of b
          w = _mm512_permutex2var_epi16(bf16_round_bits(_mm512_castsi512_ps(a[i])), even_words,
                                        bf16_round_bits(_mm512_castsi512_ps(b[i])));
        }
        if (e0 + 32 <= dv) _mm512_storeu_si512(o, w);
        else _mm512_mask_storeu_epi16(o, se, w);
      }
    }
  }
  return _mm512_cmpge_epu32_mask(top, _mm512_set1_epi32(0x7f800000)) != 0;
}

// The roundings of store_f32: bf16 round to nearest even on the bits (NaN -> quiet, subnormals
// kept, where vcvtneps2bf16 would flush them), fp16 through vcvtps2ph (IEEE, nearest even).
void store_row_avx512(const float* x, int64_t n, DType t, void* dst) {
  for (int64_t e = 0; e < n; e += 16) {
    const __mmask16 k = head_mask(n - e);
    const __m512 v = _mm512_maskz_loadu_ps(k, x + e);
    if (t == DType::float32) {
      _mm512_mask_storeu_ps(static_cast<float*>(dst) + e, k, v);
    } else if (t == DType::float16) {
      _mm256_mask_storeu_epi16(static_cast<uint16_t*>(dst) + e, k, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    } else {
      _mm256_mask_storeu_epi16(static_cast<uint16_t*>(dst) + e, k, _mm512_cvtepi32_epi16(bf16_round_bits(v)));
    }
  }
}

// (A plane, B plane) of the products summed for T terms: hi*hi, then hi*lo + lo*hi for fp16.
constexpr int kProducts[3][2] = {{0, 0}, {0, 1}, {1, 0}};
inline int num_products(int terms) { return terms == 2 ? 3 : 1; }

// ---------------------------------------------------------------------------------------------
// vdpbf16ps products.

inline __m512 dp(__m512 c, uint32_t pair, __m512i row) {
  return _mm512_dpbf16_ps(c, (__m512bh)_mm512_set1_epi32(static_cast<int>(pair)), (__m512bh)row);
}
inline uint32_t dword_at(const uint16_t* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return u;
}

// st block: keys [0, NB) of kb x queries [0, 16 MV) of qv.
template <int NB, int MV>
inline void qk16_block(const uint16_t* qv, int64_t mp, int64_t d2n, int64_t qplane, const uint16_t* kb,
                       int64_t dqk_p, int64_t kplane, int terms, float scale, float* st, __mmask16* ext) {
  __m512 c[NB][MV];
#pragma GCC unroll 16
  for (int n = 0; n < NB; ++n)
#pragma GCC unroll 3
    for (int v = 0; v < MV; ++v) c[n][v] = _mm512_setzero_ps();
  for (int pr = 0; pr < num_products(terms); ++pr) {
    const uint16_t* k = kb + kProducts[pr][0] * kplane;
    const uint16_t* q = qv + kProducts[pr][1] * qplane;
    for (int64_t d2 = 0; d2 < d2n; ++d2) {
      __m512i x[MV];
#pragma GCC unroll 3
      for (int v = 0; v < MV; ++v) x[v] = _mm512_loadu_si512(q + (d2 * mp + 16 * v) * 2);
#pragma GCC unroll 16
      for (int n = 0; n < NB; ++n) {
        const uint32_t pair = dword_at(k + n * dqk_p + 2 * d2);
#pragma GCC unroll 3
        for (int v = 0; v < MV; ++v) c[n][v] = dp(c[n][v], pair, x[v]);
      }
    }
  }
  const __m512 sc = _mm512_set1_ps(scale), big = _mm512_set1_ps(kExtremeScore);
  __mmask16 e = 0;
#pragma GCC unroll 16
  for (int n = 0; n < NB; ++n)
#pragma GCC unroll 3
    for (int v = 0; v < MV; ++v) {
      const __m512 x = _mm512_mul_ps(sc, c[n][v]);
      _mm512_storeu_ps(st + n * mp + 16 * v, x);
      e |= _mm512_cmp_ps_mask(_mm512_abs_ps(x), big, _CMP_NLT_UQ);
    }
  *ext |= e;
}

template <int MV, int NB>
inline void qk16_tail(int nb, const uint16_t* qv, int64_t mp, int64_t d2n, int64_t qplane, const uint16_t* kb,
                      int64_t dqk_p, int64_t kplane, int terms, float scale, float* st, __mmask16* ext) {
  if constexpr (NB > 1) {
    if (nb == NB - 1) return qk16_block<NB - 1, MV>(qv, mp, d2n, qplane, kb, dqk_p, kplane, terms, scale, st, ext);
    return qk16_tail<MV, NB - 1>(nb, qv, mp, d2n, qplane, kb, dqk_p, kplane, terms, scale, st, ext);
  }
}

template <int NB, int MV>
bool qk16_t(const uint16_t* qv, int64_t mp, int64_t m, int64_t dqk, const uint16_t* kb, int64_t ld, int64_t n,
            int terms, float scale, float* st) {
  __mmask16 ext = 0;
  const int64_t dqk_p = rup(dqk, 32), d2n = (dqk + 1) / 2, qplane = dqk_p * mp, kplane = ld * dqk_p;
  for (int64_t m0 = 0; m0 < m; m0 += 16 * MV) {
    int64_t n0 = 0;
    for (; n0 + NB <= n; n0 += NB)
      qk16_block<NB, MV>(qv + m0 * 2, mp, d2n, qplane, kb + n0 * dqk_p, dqk_p, kplane, terms, scale, st + n0 * mp + m0,
                         &ext);
    if (n0 < n)
      qk16_tail<MV, NB>(static_cast<int>(n - n0), qv + m0 * 2, mp, d2n, qplane, kb + n0 * dqk_p, dqk_p, kplane, terms,
                        scale, st + n0 * mp + m0, &ext);
  }
  return ext != 0;
}

bool qk16_avx512(const uint16_t* qv, int64_t mp, int64_t m, int64_t dqk, const uint16_t* kb, int64_t ld, int64_t n,
                 int terms, float scale, float* st) {
  if (m % 48 == 0) return qk16_t<8, 3>(qv, mp, m, dqk, kb, ld, n, terms, scale, st);
  if (m % 32 == 0) return qk16_t<12, 2>(qv, mp, m, dqk, kb, ld, n, terms, scale, st);
  return qk16_t<16, 1>(qv, mp, m, dqk, kb, ld, n, terms, scale, st);
}

// ot block: dims [0, NB) of vt x queries [0, 16 MV) of pp, over j2n key pairs.
template <int NB, int MV>
inline void pv16_block(const uint16_t* pp, int64_t m, int64_t j2n, int64_t pplane, const uint16_t* vt, int64_t nk_p,
                       int64_t vplane, int terms, int64_t mp, float* ot) {
  __m512 c[NB][MV];
#pragma GCC unroll 16
  for (int e = 0; e < NB; ++e)
#pragma GCC unroll 3
    for (int v = 0; v < MV; ++v) c[e][v] = _mm512_loadu_ps(ot + e * mp + 16 * v);
  for (int pr = 0; pr < num_products(terms); ++pr) {
    const uint16_t* a = vt + kProducts[pr][0] * vplane;
    const uint16_t* b = pp + kProducts[pr][1] * pplane;
    for (int64_t j = 0; j < j2n; ++j) {
      __m512i x[MV];
#pragma GCC unroll 3
      for (int v = 0; v < MV; ++v) x[v] = _mm512_loadu_si512(b + (j * m + 16 * v) * 2);
#pragma GCC unroll 16
      for (int e = 0; e < NB; ++e) {
        const uint32_t pair = dword_at(a + e * nk_p + 2 * j);
#pragma GCC unroll 3
        for (int v = 0; v < MV; ++v) c[e][v] = dp(c[e][v], pair, x[v]);
      }
    }
  }
#pragma GCC unroll 16
  for (int e = 0; e < NB; ++e)
#pragma GCC unroll 3
    for (int v = 0; v < MV; ++v) _mm512_storeu_ps(ot + e * mp + 16 * v, c[e][v]);
}

template <int MV, int NB>
inline void pv16_tail(int nb, const uint16_t* pp, int64_t m, int64_t j2n, int64_t pplane, const uint16_t* vt,
                      int64_t nk_p, int64_t vplane, int terms, int64_t mp, float* ot) {
  if constexpr (NB > 1) {
    if (nb == NB - 1) return pv16_block<NB - 1, MV>(pp, m, j2n, pplane, vt, nk_p, vplane, terms, mp, ot);
    return pv16_tail<MV, NB - 1>(nb, pp, m, j2n, pplane, vt, nk_p, vplane, terms, mp, ot);
  }
}

template <int NB, int MV>
void pv16_t(const uint16_t* pp, int64_t mp, int64_t m, int64_t n, const uint16_t* vt, int64_t ld, int64_t dv,
            int terms, float* ot) {
  // vt rows are ld keys long (the panel's nk_p); pp is packed for n keys.
  const int64_t nk_p = rup(n, 32), dv_p = rup(dv, 16), j2n = (n + 1) / 2, pplane = nk_p * m, vplane = dv_p * ld;
  for (int64_t m0 = 0; m0 < m; m0 += 16 * MV) {
    int64_t e0 = 0;
    for (; e0 + NB <= dv; e0 += NB)
      pv16_block<NB, MV>(pp + m0 * 2, m, j2n, pplane, vt + e0 * ld, ld, vplane, terms, mp, ot + e0 * mp + m0);
    if (e0 < dv)
      pv16_tail<MV, NB>(static_cast<int>(dv - e0), pp + m0 * 2, m, j2n, pplane, vt + e0 * ld, ld, vplane, terms, mp,
                        ot + e0 * mp + m0);
  }
}

void pv16_avx512(const float* st, int64_t mp, int64_t m, int64_t n, const uint16_t* vt, int64_t ld, int64_t dv,
                 int terms, const float* alpha, uint16_t* pp, float* ot) {
  if (st) pack_p_avx512(st, mp, m, n, terms, pp);
  rescale_ot_avx512(ot, mp, m, dv, alpha);
  if (m % 48 == 0) return pv16_t<8, 3>(pp, mp, m, n, vt, ld, dv, terms, ot);
  if (m % 32 == 0) return pv16_t<12, 2>(pp, mp, m, n, vt, ld, dv, terms, ot);
  return pv16_t<16, 1>(pp, mp, m, n, vt, ld, dv, terms, ot);
}

}  // namespace

const LowpKernels& avx512_lowp() {
  static const LowpKernels k{32,          pack_q_avx512, pack_q_rows_avx512, pack_k_avx512,
                             pack_v_avx512, qk16_avx512,   pv16_avx512,        nullptr,
                             nullptr};
  return k;
}

const Kernels& avx512_kernels(bool bf16) {
  // The row-major decode kernels (<= 8 query rows): cpu_rows_avx512.cpp for bf16, which falls
  // back to the AVX2 ones (AVX-512 implies AVX2 + FMA + F16C, cpu_isa.cpp checks) for the rest;
  // the conversions are the AVX2 table's.
  static const F32Panels f32p{128, 0, 48, pack_k_f32, pack_v_f32, qk_f32p, pv_f32p};
  static const Kernels with_bf16 = [] {
    const Kernels& a = avx2_kernels();
    Kernels k{"avx512",       16,        qk_avx512,        pv_avx512,        softmax_avx512,
              qk_rows_avx512, pv_rows_avx512, a.convert,   &avx512_lowp(),   nullptr,
              transpose_avx512, store_row_avx512, &f32p};
    k.softmax_flags_extreme = true;
    k.transpose_store16 = transpose_store16_avx512;
    return k;
  }();
  static const Kernels without_bf16 = [] {
    Kernels k = with_bf16;
    k.lowp_bf16 = nullptr;
    return k;
  }();
  static const Kernels with_bf16_rows = [] {
    Kernels k = with_bf16;
    k.qk_rows = qk_rows_avx512bf16;
    k.pv_rows = pv_rows_avx512bf16;
    return k;
  }();
  return bf16 ? with_bf16_rows : without_bf16;
}

}  // namespace fa4::core::cpu
