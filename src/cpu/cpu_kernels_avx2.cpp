// AVX2 + FMA (+ F16C) kernels. Compiled with -mavx2 -mfma -mf16c (CMake: *_avx2.cpp) and only
// called after best_kernels() saw those features at run time.
//
// Register blocking (16 ymm registers on AVX2): a micro-tile is NB broadcast rows x MV vectors
// of 8 queries, NB*MV accumulators + MV query/probability vectors + 1 broadcast register <= 16:
//   MV = 3: NB = 4 (12 acc)   MV = 2: NB = 6 (12 acc)   MV = 1: NB = 8 (8 acc)
// Twelve independent FMA chains cover Zen3's 2 FMA pipes x 4-cycle latency (8 in flight
// needed); per inner step the loads (MV vector loads + NB broadcasts) stay under the 3/cycle
// load ports, so the FMA pipes set the pace.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

// Deliberately no core/*.h helpers here: an inline function compiled in this -mavx2 file could
// be the copy the linker keeps for the whole library, and then run on a CPU without AVX2.
#include "cpu/cpu_kernels.h"

namespace fa4::core::cpu {
namespace {

// The accumulators are named scalars, not an array: GCC 12 does not keep a __m256 acc[NB][MV]
// array in registers and spills all of it to the stack on every step (measured: 3-4x slower).
// Unused names (NB < 8, MV < 3) are dead code and vanish.
#define FA4_ACC_DECL(n) __m256 c##n##0 = zero, c##n##1 = zero, c##n##2 = zero;
#define FA4_ACC_ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
// c[n][v] += broadcast(x) * vec[v], for row n < NB.
#define FA4_FMA_ROW(n, ptr)                                        \
  if constexpr (NB > n) {                                          \
    const __m256 bc = _mm256_broadcast_ss(ptr);                    \
    c##n##0 = _mm256_fmadd_ps(bc, x0, c##n##0);                    \
    if constexpr (MV > 1) c##n##1 = _mm256_fmadd_ps(bc, x1, c##n##1); \
    if constexpr (MV > 2) c##n##2 = _mm256_fmadd_ps(bc, x2, c##n##2); \
  }
#define FA4_STORE_ROW(n, base)                                                \
  if constexpr (NB > n) {                                                     \
    _mm256_storeu_ps((base) + n * mp, c##n##0);                               \
    if constexpr (MV > 1) _mm256_storeu_ps((base) + n * mp + 8, c##n##1);     \
    if constexpr (MV > 2) _mm256_storeu_ps((base) + n * mp + 16, c##n##2);    \
  }
#define FA4_LOAD_X(base)                                             \
  const __m256 x0 = _mm256_loadu_ps(base);                           \
  const __m256 x1 = MV > 1 ? _mm256_loadu_ps((base) + 8) : zero;     \
  const __m256 x2 = MV > 2 ? _mm256_loadu_ps((base) + 16) : zero;

// ---------------------------------------------------------------------------------------------
// S^T micro-tile: keys n0..n0+NB x queries m0..m0+8*MV, summed over all d.
template <int NB, int MV>
inline void qk_block(const float* qt, int64_t mp, int64_t d, const float* const* kr, float* st) {
  const __m256 zero = _mm256_setzero_ps();
  FA4_ACC_ALL(FA4_ACC_DECL)
  const float* k0 = kr[0];
  const float* k1 = NB > 1 ? kr[1] : k0;
  const float* k2 = NB > 2 ? kr[2] : k0;
  const float* k3 = NB > 3 ? kr[3] : k0;
  const float* k4 = NB > 4 ? kr[4] : k0;
  const float* k5 = NB > 5 ? kr[5] : k0;
  const float* k6 = NB > 6 ? kr[6] : k0;
  const float* k7 = NB > 7 ? kr[7] : k0;
  for (int64_t dd = 0; dd < d; ++dd) {
    FA4_LOAD_X(qt + dd * mp)
    FA4_FMA_ROW(0, k0 + dd)
    FA4_FMA_ROW(1, k1 + dd)
    FA4_FMA_ROW(2, k2 + dd)
    FA4_FMA_ROW(3, k3 + dd)
    FA4_FMA_ROW(4, k4 + dd)
    FA4_FMA_ROW(5, k5 + dd)
    FA4_FMA_ROW(6, k6 + dd)
    FA4_FMA_ROW(7, k7 + dd)
  }
  FA4_STORE_ROW(0, st) FA4_STORE_ROW(1, st) FA4_STORE_ROW(2, st) FA4_STORE_ROW(3, st)
  FA4_STORE_ROW(4, st) FA4_STORE_ROW(5, st) FA4_STORE_ROW(6, st) FA4_STORE_ROW(7, st)
}

template <int MV, int NB>
inline void qk_tail(int nb, const float* qt, int64_t mp, int64_t d, const float* const* kr, float* st) {
  if constexpr (NB > 1) {
    if (nb == NB - 1) return qk_block<NB - 1, MV>(qt, mp, d, kr, st);
    return qk_tail<MV, NB - 1>(nb, qt, mp, d, kr, st);
  }
}

template <int NB, int MV>
void qk_avx2_t(const float* qt, int64_t mp, int64_t m, int64_t d, const float* const* krows, int64_t nk, float* st) {
  // m-strips outside: the Q^T strip [d][8*MV] stays in L1 while all key rows stream past it.
  for (int64_t m0 = 0; m0 < m; m0 += 8 * MV) {
    int64_t n0 = 0;
    for (; n0 + NB <= nk; n0 += NB) qk_block<NB, MV>(qt + m0, mp, d, krows + n0, st + n0 * mp + m0);
    if (n0 < nk) qk_tail<MV, NB>(static_cast<int>(nk - n0), qt + m0, mp, d, krows + n0, st + n0 * mp + m0);
  }
}

// ---------------------------------------------------------------------------------------------
// O^T micro-tile: value dims e0..e0+NB x queries m0..m0+8*MV, accumulated over all nk keys,
// with the online-softmax rescale (alpha per query) fused into the load of O.
template <int NB, int MV>
inline void pv_block(const float* pt, int64_t mp, int64_t nk, const float* const* vr, int64_t e0,
                     const float* alpha, float* ot) {
  const __m256 zero = _mm256_setzero_ps();
  FA4_ACC_ALL(FA4_ACC_DECL)
  {
    FA4_LOAD_X(alpha)
#define FA4_PV_INIT(n)                                                                           \
  if constexpr (NB > n) {                                                                        \
    c##n##0 = _mm256_mul_ps(x0, _mm256_loadu_ps(ot + n * mp));                                   \
    if constexpr (MV > 1) c##n##1 = _mm256_mul_ps(x1, _mm256_loadu_ps(ot + n * mp + 8));         \
    if constexpr (MV > 2) c##n##2 = _mm256_mul_ps(x2, _mm256_loadu_ps(ot + n * mp + 16));        \
  }
    FA4_ACC_ALL(FA4_PV_INIT)
#undef FA4_PV_INIT
  }
  for (int64_t j = 0; j < nk; ++j) {
    FA4_LOAD_X(pt + j * mp)
    const float* vj = vr[j] + e0;
    FA4_FMA_ROW(0, vj + 0)
    FA4_FMA_ROW(1, vj + 1)
    FA4_FMA_ROW(2, vj + 2)
    FA4_FMA_ROW(3, vj + 3)
    FA4_FMA_ROW(4, vj + 4)
    FA4_FMA_ROW(5, vj + 5)
    FA4_FMA_ROW(6, vj + 6)
    FA4_FMA_ROW(7, vj + 7)
  }
  FA4_STORE_ROW(0, ot) FA4_STORE_ROW(1, ot) FA4_STORE_ROW(2, ot) FA4_STORE_ROW(3, ot)
  FA4_STORE_ROW(4, ot) FA4_STORE_ROW(5, ot) FA4_STORE_ROW(6, ot) FA4_STORE_ROW(7, ot)
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
void pv_avx2_t(const float* pt, int64_t mp, int64_t m, int64_t nk, const float* const* vrows, int64_t dv,
               const float* alpha, float* ot) {
  // m-strips outside: the P^T strip [nk][8*MV] stays in L1 across all value dims.
  for (int64_t m0 = 0; m0 < m; m0 += 8 * MV) {
    int64_t e0 = 0;
    for (; e0 + NB <= dv; e0 += NB) pv_block<NB, MV>(pt + m0, mp, nk, vrows, e0, alpha + m0, ot + e0 * mp + m0);
    if (e0 < dv)
      pv_tail<MV, NB>(static_cast<int>(dv - e0), pt + m0, mp, nk, vrows, e0, alpha + m0, ot + e0 * mp + m0);
  }
}

// The widest blocking that divides m (m is always a multiple of 8).
void qk_avx2(const float* qt, int64_t mp, int64_t m, int64_t d, const float* const* krows, int64_t nk, float* st) {
  if (m % 24 == 0) return qk_avx2_t<4, 3>(qt, mp, m, d, krows, nk, st);
  if (m % 16 == 0) return qk_avx2_t<6, 2>(qt, mp, m, d, krows, nk, st);
  return qk_avx2_t<8, 1>(qt, mp, m, d, krows, nk, st);
}

void pv_avx2(const float* pt, int64_t mp, int64_t m, int64_t nk, const float* const* vrows, int64_t dv,
             const float* alpha, float* ot) {
  if (m % 24 == 0) return pv_avx2_t<4, 3>(pt, mp, m, nk, vrows, dv, alpha, ot);
  if (m % 16 == 0) return pv_avx2_t<6, 2>(pt, mp, m, nk, vrows, dv, alpha, ot);
  return pv_avx2_t<8, 1>(pt, mp, m, nk, vrows, dv, alpha, ot);
}

// ---------------------------------------------------------------------------------------------
// exp2 on 8 lanes: 2^x = 2^n * 2^f, n = round(x), f in [-1/2, 1/2], 2^f by the Cephes exp2f
// polynomial (relative error ~2e-7, about 1.5 ulp). Exactly 0 below -126 (masked keys are -inf
// and must contribute exactly nothing, and no denormals enter the P·V products); NaN stays NaN
// (the clamp keeps x as the operand max/min return on NaN).
inline __m256 exp2_avx2(__m256 x) {
  const __m256 xc = _mm256_min_ps(_mm256_set1_ps(127.0f), _mm256_max_ps(_mm256_set1_ps(-126.0f), x));
  const __m256 n = _mm256_round_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(xc, n);
  __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 r = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_LT_OQ);  // false for NaN
  return _mm256_andnot_ps(under, r);
}

// tanh(x) = sign(x) (1 - t) / (1 + t), t = e^{-2|x|}, for |x| >= 0.625: no overflow for any x,
// error ~1e-7. Below 0.625, 1 - t cancels (tanh(1e-37) came out 0, so softcap = 1e37 zeroed every
// score), so there the Cephes tanhf odd polynomial x + x^3 P(x^2) keeps the relative error ~1e-7.
inline __m256 tanh_avx2(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 ax = _mm256_andnot_ps(sign, x);
  const __m256 t = exp2_avx2(_mm256_mul_ps(ax, _mm256_set1_ps(-2.0f * 1.4426950408889634f)));
  const __m256 big = _mm256_div_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), t), _mm256_add_ps(_mm256_set1_ps(1.0f), t));
  const __m256 z = _mm256_mul_ps(ax, ax);
  __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), ax, ax);
  const __m256 r = _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));  // NaN: big
  return _mm256_or_ps(r, _mm256_and_ps(sign, x));
}

// SoftmaxStep on AVX2: scores already scaled (the fp32 tables' scale is 1: no raw_scores here),
// in natural or (log2_units, the fp32 panel products) log2 units; with s.redo, the driver's
// extreme-score check (a visible score NaN or of magnitude >= kExtremeScore, before softcap) on
// the max pass, as softmax_avx512 does it (the panel path relies on it).
void softmax_avx2(const SoftmaxStep& s) {
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256 pos_inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256 big = _mm256_set1_ps(kExtremeScore), sign = _mm256_set1_ps(-0.0f);
  const bool cap = s.softcap_in != 0.0f, check = s.redo != nullptr;
  const __m256 cap_in = _mm256_set1_ps(s.softcap_in), cap_out = _mm256_set1_ps(s.softcap_out);
  // In log2 units s - m is the exponent itself (no rounding of (s - m) log2 e).
  const __m256 log2e = _mm256_set1_ps(s.log2_units ? 1.0f : 1.4426950408889634f);
  for (int64_t m0 = 0; m0 < s.m; m0 += 8) {
    float* col = s.st + m0;
    __m256 mx = neg_inf, ext = _mm256_setzero_ps();
    if (cap || s.lo) {
      __m256i lo = _mm256_setzero_si256(), hi = lo;
      if (s.lo) {
        lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.lo + m0));
        hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.hi + m0));
      }
      for (int64_t n = 0; n < s.nk; ++n) {
        __m256 x = _mm256_loadu_ps(col + n * s.mp);
        __m256 vis = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
        if (s.lo) {
          const __m256i nv = _mm256_set1_epi32(static_cast<int32_t>(n));
          vis = _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_cmpgt_epi32(lo, nv), _mm256_cmpgt_epi32(hi, nv)));
        }
        if (check) ext = _mm256_or_ps(ext, _mm256_and_ps(vis, _mm256_cmp_ps(_mm256_andnot_ps(sign, x), big, _CMP_NLT_UQ)));
        if (cap) x = _mm256_mul_ps(cap_out, tanh_avx2(_mm256_mul_ps(x, cap_in)));
        if (s.lo) x = _mm256_blendv_ps(neg_inf, x, vis);
        _mm256_storeu_ps(col + n * s.mp, x);
        mx = _mm256_max_ps(mx, x);
      }
    } else if (check) {
      __m256 mn = pos_inf;
      for (int64_t n = 0; n < s.nk; ++n) {
        const __m256 x = _mm256_loadu_ps(col + n * s.mp);
        mx = _mm256_max_ps(mx, x);
        mn = _mm256_min_ps(mn, x);
      }
      // (A NaN score is not kept by max / min: it reaches the row sum, checked below.)
      ext = _mm256_or_ps(_mm256_cmp_ps(mx, big, _CMP_GE_OQ), _mm256_cmp_ps(mn, _mm256_set1_ps(-kExtremeScore), _CMP_LE_OQ));
    } else {
      for (int64_t n = 0; n < s.nk; ++n) mx = _mm256_max_ps(mx, _mm256_loadu_ps(col + n * s.mp));
    }
    const __m256 m_old = _mm256_loadu_ps(s.m_run + m0);
    const __m256 m_new = _mm256_max_ps(mx, m_old);
    const __m256 m_use = _mm256_andnot_ps(_mm256_cmp_ps(m_new, neg_inf, _CMP_EQ_OQ), m_new);  // -inf -> 0
    __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
    __m256 pmin = _mm256_set1_ps(1.0f);  // min_ps(p, pmin) keeps pmin where p is NaN
    int64_t n = 0;
    for (; n + 2 <= s.nk; n += 2) {
      const __m256 p0 = exp2_avx2(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(col + n * s.mp), m_use), log2e));
      const __m256 p1 = exp2_avx2(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(col + (n + 1) * s.mp), m_use), log2e));
      _mm256_storeu_ps(col + n * s.mp, p0);
      _mm256_storeu_ps(col + (n + 1) * s.mp, p1);
      sum0 = _mm256_add_ps(sum0, p0);
      sum1 = _mm256_add_ps(sum1, p1);
      pmin = _mm256_min_ps(p1, _mm256_min_ps(p0, pmin));
    }
    if (n < s.nk) {
      const __m256 p0 = exp2_avx2(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(col + n * s.mp), m_use), log2e));
      _mm256_storeu_ps(col + n * s.mp, p0);
      sum0 = _mm256_add_ps(sum0, p0);
      pmin = _mm256_min_ps(p0, pmin);
    }
    if (s.zero_p && _mm256_movemask_ps(_mm256_cmp_ps(pmin, _mm256_setzero_ps(), _CMP_EQ_OQ))) *s.zero_p = 1;
    const __m256 sum = _mm256_add_ps(sum0, sum1);
    if (check) {
      const int bits = _mm256_movemask_ps(_mm256_or_ps(ext, _mm256_cmp_ps(sum, sum, _CMP_UNORD_Q)));
      for (int i = 0; i < 8; ++i)
        if (bits >> i & 1) s.redo[m0 + i] = 1;
    }
    const __m256 a = exp2_avx2(_mm256_mul_ps(_mm256_sub_ps(m_old, m_use), log2e));
    _mm256_storeu_ps(s.alpha + m0, a);
    _mm256_storeu_ps(s.l_run + m0, _mm256_fmadd_ps(_mm256_loadu_ps(s.l_run + m0), a, sum));
    _mm256_storeu_ps(s.m_run + m0, m_new);
  }
}

// ---------------------------------------------------------------------------------------------
// Row-major kernels for <= 8 query rows (see cpu_kernels.h).

// 8 storage elements -> 8 fp32.
template <class T>
inline __m256 load8(const T* p);
template <>
inline __m256 load8<float>(const float* p) { return _mm256_loadu_ps(p); }
template <>
inline __m256 load8<uint16_t>(const uint16_t* p) {  // bf16: the high half of an fp32
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
struct Half {  // fp16 tag
  uint16_t bits;
};
template <>
inline __m256 load8<Half>(const Half* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// OCP e4m3 ("fn": no infinities, S.1111.111 is NaN) -> fp32 without a table: the 7 magnitude
// bits shifted left by 20 land exponent and mantissa in fp32's fields with a bias of 127
// instead of 7, so one multiply by 2^120 rebiases normals and subnormals alike (an fp32
// subnormal m * 2^-129 becomes m * 2^-9, e4m3's subnormal value).
struct E4m3 {  // fp8 tag
  uint8_t bits;
};
inline __m256 e4m3x8_to_f32(__m128i bytes8) {
  const __m256i b = _mm256_cvtepu8_epi32(bytes8);
  const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi32(0x7f));
  __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(mag, 20)), _mm256_set1_ps(0x1p120f));
  const __m256 nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f)));
  f = _mm256_blendv_ps(f, _mm256_set1_ps(__builtin_nanf("")), nan);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
  return _mm256_or_ps(f, _mm256_castsi256_ps(sign));
}
template <>
inline __m256 load8<E4m3>(const E4m3* p) {
  return e4m3x8_to_f32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Row-major decode kernels (Kernels::qk_rows / pv_rows). With 4 query rows per K / V element their
// fp32 products are 128 FMAs per key and head, 17.5 ns at Zen 4's 2 a cycle: measured, the steps
// run at ~70 % of that and the touch pass takes as long again (docs/perf/cpu.md, 2026-12-07 13:15).
//
// 16 storage elements as two fp32 vectors. bf16 comes out as its even and odd elements: one
// 32-byte load, x << 16 and x & 0xffff0000 (2 ops per 16 where vpmovzxwd + shift take 4 -- the
// AVX-512 loader's trick, cpu_rows_avx512.cpp); q and O are then kept in that order. The other
// dtypes come out in order (first 8, last 8).
// (Returned by value: GCC 12 keeps an accumulator array whose elements' addresses were passed
// to a helper in memory, a store per FMA.)
struct Vec2 {
  __m256 a, b;
};
template <class T>
struct Load16 {
  static constexpr bool kEvenOdd = false;
  static Vec2 load(const T* p) { return {load8<T>(p), load8<T>(p + 8)}; }
};
template <>
struct Load16<uint16_t> {
  static constexpr bool kEvenOdd = true;
  static Vec2 load(const uint16_t* p) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(x, 16)), _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(-65536)))};
  }
};

// e4m3, 16 bytes: their bf16 bit patterns times 2^-120 in 16-bit lanes (the 7 magnitude bits << 4
// put exponent and mantissa in bf16's fields with a bias of 127 instead of 7, as e4m3x8_to_f32
// does in fp32's; the sign to bit 15; magnitude 0x7f, NaN, gets an all-ones exponent), split as
// bf16 and multiplied by 2^120 (subnormals included). 13 ops per 16 where two e4m3x8_to_f32
// take 18.
template <>
struct Load16<E4m3> {
  static constexpr bool kEvenOdd = true;
  static Vec2 load(const E4m3* p) {
    const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7f));
    __m256i x = _mm256_or_si256(_mm256_slli_epi16(mag, 4), _mm256_and_si256(_mm256_slli_epi16(w, 8), _mm256_set1_epi16(-32768)));
    x = _mm256_or_si256(x, _mm256_and_si256(_mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7f80)));
    const __m256 s = _mm256_set1_ps(0x1p120f);
    return {_mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(x, 16)), s),
            _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(-65536))), s)};
  }
};

// 16 floats in order <-> (even, odd): [x0 x2 .. x14], [x1 x3 .. x15].
inline Vec2 split_even_odd(const float* x) {
  const __m256 a = _mm256_loadu_ps(x), b = _mm256_loadu_ps(x + 8);
  // shuffle_ps: [a0 a2 b0 b2 | a4 a6 b4 b6]; the 64-bit permute puts the halves in order.
  return {_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8)),
          _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8))};
}
inline void merge_even_odd(__m256 e, __m256 o, float* x) {
  // [e0 e1 e4 e5 | e2 e3 e6 e7] interleaved with the same of o: x0..x7, then x8..x15.
  const __m256 e2 = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xd8));
  const __m256 o2 = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xd8));
  _mm256_storeu_ps(x, _mm256_unpacklo_ps(e2, o2));
  _mm256_storeu_ps(x + 8, _mm256_unpackhi_ps(e2, o2));
}

// Per 128-bit lane, [sum a0, sum a1, sum a2, sum a3] of that lane (unpacks and adds: hadd is 3-4
// uops on Zen and Intel).
inline __m256 lane_sums4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t01 = _mm256_add_ps(_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
  const __m256 t23 = _mm256_add_ps(_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
  return _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(t01), _mm256_castps_pd(t23))),
                       _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(t01), _mm256_castps_pd(t23))));
}

// Row-major q.k: KB keys x R rows of dot products at once (R * KB accumulators, each summing both
// vectors of a 16-dim step; qp: R rows of d, in the loader's order per 16 dims, the last 8 dims
// of d % 16 = 8 in order). Sums into st[kb * 8 + r], rows R..8 zero. RP: R rounded up to 4 or 8
// (rows R..RP are zero accumulators, so the sums of a key fill half or all of a vector).
// (The loops over kb / r / v here and in pv_pass are unrolled by pragma: where GCC 12 left one
// rolled, it kept the accumulator array in memory too, a store per FMA.)
template <class T, int R, int KB>
inline void qk_keys(const float* qp, int64_t d, const void* const* krows, float* st) {
  constexpr int RP = R <= 4 ? 4 : 8;
  __m256 acc[KB][RP];
  #pragma GCC unroll 16
  for (int kb = 0; kb < KB; ++kb)
    #pragma GCC unroll 16
    for (int r = 0; r < RP; ++r) acc[kb][r] = _mm256_setzero_ps();
  const T* k[KB];
  #pragma GCC unroll 16
  for (int kb = 0; kb < KB; ++kb) k[kb] = static_cast<const T*>(krows[kb]);
  int64_t c = 0;
  for (; c + 16 <= d; c += 16) {
    __m256 ka[KB], kbv[KB];
    #pragma GCC unroll 16
    for (int kb = 0; kb < KB; ++kb) {
      const Vec2 x = Load16<T>::load(k[kb] + c);
      ka[kb] = x.a, kbv[kb] = x.b;
    }
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m256 qa = _mm256_loadu_ps(qp + r * d + c), qb = _mm256_loadu_ps(qp + r * d + c + 8);
      // In registers, not FMA memory operands (GCC's choice): Zen 4 loads two 32-byte vectors
      // a cycle, and 2 KB R operand loads + 2 KB K loads per 2 KB R FMAs made q.k load-bound
      // (microbench, R 4, KB 2: 14.7 -> 12.6 ns a key).
      __asm__("" : "+x"(qa), "+x"(qb));
      #pragma GCC unroll 16
      for (int kb = 0; kb < KB; ++kb) {
        acc[kb][r] = _mm256_fmadd_ps(ka[kb], qa, acc[kb][r]);
        acc[kb][r] = _mm256_fmadd_ps(kbv[kb], qb, acc[kb][r]);
      }
    }
  }
  if (c < d)
    #pragma GCC unroll 16
    for (int kb = 0; kb < KB; ++kb) {
      const __m256 kv = load8<T>(k[kb] + c);
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[kb][r] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(qp + r * d + c), acc[kb][r]);
    }
  #pragma GCC unroll 16
  for (int kb = 0; kb < KB; ++kb) {
    if constexpr (RP == 8) {
      const __m256 u0 = lane_sums4(acc[kb][0], acc[kb][1], acc[kb][2], acc[kb][3]);
      const __m256 u1 = lane_sums4(acc[kb][4], acc[kb][5], acc[kb][6], acc[kb][7]);
      _mm256_storeu_ps(st + kb * 8, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
    } else {
      const __m256 u = lane_sums4(acc[kb][0], acc[kb][1], acc[kb][2], acc[kb][3]);
      _mm_storeu_ps(st + kb * 8, _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1)));
      _mm_storeu_ps(st + kb * 8 + 4, _mm_setzero_ps());
    }
  }
}

template <class T, int R>
void qk_rows_t(const float* q, int64_t d, const void* const* krows, int64_t nk, float* st) {
  // Keys per block: R * KB accumulators of two FMAs per 16-dim step, at least 8 independent
  // chains (Zen 3 / 4: 2 FMA pipes x 4 cycles), at most 12 (+ the two K vectors: 14 of the 16 ymm
  // registers).
  constexpr int KB = R == 1 ? 4 : R == 2 ? 3 : R <= 4 ? 2 : 1;
  alignas(32) float qbuf[Load16<T>::kEvenOdd ? 8 * 256 : 1];  // d <= 256 (validate.cpp)
  const float* qp = q;
  if constexpr (Load16<T>::kEvenOdd) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      int64_t c = 0;
      for (; c + 16 <= d; c += 16) {
        const Vec2 eo = split_even_odd(q + r * d + c);
        _mm256_store_ps(qbuf + r * d + c, eo.a);
        _mm256_store_ps(qbuf + r * d + c + 8, eo.b);
      }
      if (c < d) _mm256_store_ps(qbuf + r * d + c, _mm256_loadu_ps(q + r * d + c));
    }
    qp = qbuf;
  }
  int64_t j = 0;
  for (; j + KB <= nk; j += KB) qk_keys<T, R, KB>(qp, d, krows + j, st + j * 8);
  if constexpr (KB > 2)
    for (; j + 2 <= nk; j += 2) qk_keys<T, R, 2>(qp, d, krows + j, st + j * 8);
  for (; j < nk; ++j) qk_keys<T, R, 1>(qp, d, krows + j, st + j * 8);
}

// Row-major P V over NV vectors of 8 dims from c0 (pairs from Load16, an odd last one in order
// from load8), R rows: NV R accumulators, over all nk keys; O read (in the loader's order, times
// alpha) and written back once per call. kPb: P from pb [nk][R][8], broadcast already.
template <class T, int R, int NV, bool kPb>
inline void pv_pass(const float* pt, const float* pb, int64_t nk, const void* const* vrows, int64_t dv, int64_t c0,
                    const float* alpha, float* o) {
  constexpr bool kEo = Load16<T>::kEvenOdd;
  __m256 a[NV][R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const float* orow = o + r * dv + c0;
    const __m256 al = _mm256_set1_ps(alpha[r]);
    #pragma GCC unroll 16
    for (int v = 0; v + 1 < NV; v += 2) {
      const Vec2 x = kEo ? split_even_odd(orow + 8 * v) : Vec2{_mm256_loadu_ps(orow + 8 * v), _mm256_loadu_ps(orow + 8 * v + 8)};
      a[v][r] = x.a, a[v + 1][r] = x.b;
    }
    if constexpr (NV % 2 == 1) a[NV - 1][r] = _mm256_loadu_ps(orow + 8 * (NV - 1));
    #pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) a[v][r] = _mm256_mul_ps(al, a[v][r]);
  }
  for (int64_t j = 0; j < nk; ++j) {
    const T* vj = static_cast<const T*>(vrows[j]) + c0;
    __m256 x[NV];
    #pragma GCC unroll 16
    for (int v = 0; v + 1 < NV; v += 2) {
      const Vec2 y = Load16<T>::load(vj + 8 * v);
      x[v] = y.a, x[v + 1] = y.b;
    }
    if constexpr (NV % 2 == 1) x[NV - 1] = load8<T>(vj + 8 * (NV - 1));
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256 p = kPb ? _mm256_load_ps(pb + (j * R + r) * 8) : _mm256_broadcast_ss(pt + j * 8 + r);
      #pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) a[v][r] = _mm256_fmadd_ps(p, x[v], a[v][r]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* orow = o + r * dv + c0;
    #pragma GCC unroll 16
    for (int v = 0; v + 1 < NV; v += 2) {
      if constexpr (kEo) {
        merge_even_odd(a[v][r], a[v + 1][r], orow + 8 * v);
      } else {
        _mm256_storeu_ps(orow + 8 * v, a[v][r]);
        _mm256_storeu_ps(orow + 8 * v + 8, a[v + 1][r]);
      }
    }
    if constexpr (NV % 2 == 1) _mm256_storeu_ps(orow + 8 * (NV - 1), a[NV - 1][r]);
  }
}

// A pass of n < NV vectors.
template <class T, int R, int NV, bool kPb>
inline void pv_rest(int n, const float* pt, const float* pb, int64_t nk, const void* const* vrows, int64_t dv,
                    int64_t c0, const float* alpha, float* o) {
  if constexpr (NV > 1) {
    if (n == NV - 1) return pv_pass<T, R, NV - 1, kPb>(pt, pb, nk, vrows, dv, c0, alpha, o);
    return pv_rest<T, R, NV - 1, kPb>(n, pt, pb, nk, vrows, dv, c0, alpha, o);
  }
}

template <class T, int R>
void pv_rows_t(const float* pt, int64_t nk, const void* const* vrows, int64_t dv, const float* alpha, float* o) {
  constexpr bool kE4m3 = std::is_same_v<T, E4m3>;
  if constexpr (R > 6 && !kE4m3) {  // two row groups (12 accumulators at most, as qk_rows_t)
    pv_rows_t<T, 4>(pt, nk, vrows, dv, alpha, o);
    pv_rows_t<T, R - 4>(pt + 4, nk, vrows, dv, alpha + 4, o + 4 * dv);
  } else {
    // Vectors per pass: NV R accumulators, 8 to 12 (see qk_rows_t). e4m3: pairs only (the
    // conversion's constants leave no register for a third vector), and at R 7 / 8 one vector of
    // all rows, converted once (two row groups convert V twice: 43 ns a key at R 8 against 39).
    constexpr int NV = kE4m3 ? (R > 6 ? 1 : R <= 2 ? 4 : 2) : R == 1 ? 6 : R == 2 ? 4 : R <= 4 ? 3 : 2;
    // There P is broadcast into a block of keys first and read by plain loads: with the
    // conversion's shuffles and shifts, vbroadcastss slowed it (R 8: 38.6 -> 34.0 ns a key; at
    // R 2 / 4 / 8 for bf16 and R 2 / 4 for e4m3 the broadcasts ran as fast or faster).
    constexpr bool kPb = kE4m3 && R > 6;
    constexpr int64_t kBlock = 64;
    alignas(32) float pb[kPb ? kBlock * R * 8 : 1];
    const float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (int64_t j0 = 0; j0 < nk; j0 += kPb ? kBlock : nk) {
      const int64_t nb = kPb ? std::min(kBlock, nk - j0) : nk;
      if constexpr (kPb)
        for (int64_t j = 0; j < nb; ++j)
          for (int r = 0; r < R; ++r) _mm256_store_ps(pb + (j * R + r) * 8, _mm256_set1_ps(pt[(j0 + j) * 8 + r]));
      const float* al = j0 == 0 ? alpha : ones;
      // Passes of NV vectors; NV + 1 left are taken as 2 + (NV - 1), not NV + 1 (a pass of one
      // vector has R chains only: at R 4 the last 8 dims of D 128 took 11% of the P V samples).
      for (int64_t c0 = 0, left = dv / 8; left > 0;) {
        const int64_t n = NV == 1 || left >= NV + 2 || left == NV ? NV : left == NV + 1 ? 2 : left;
        if (n == NV)
          pv_pass<T, R, NV, kPb>(pt + j0 * 8, pb, nb, vrows + j0, dv, c0, al, o);
        else
          pv_rest<T, R, NV, kPb>(static_cast<int>(n), pt + j0 * 8, pb, nb, vrows + j0, dv, c0, al, o);
        c0 += 8 * n, left -= n;
      }
    }
  }
}

template <class T>
void qk_rows_dispatch(const float* q, int64_t rows, int64_t d, const void* const* krows, int64_t nk, float* st) {
  switch (rows) {
    case 1: return qk_rows_t<T, 1>(q, d, krows, nk, st);
    case 2: return qk_rows_t<T, 2>(q, d, krows, nk, st);
    case 3: return qk_rows_t<T, 3>(q, d, krows, nk, st);
    case 4: return qk_rows_t<T, 4>(q, d, krows, nk, st);
    case 5: return qk_rows_t<T, 5>(q, d, krows, nk, st);
    case 6: return qk_rows_t<T, 6>(q, d, krows, nk, st);
    case 7: return qk_rows_t<T, 7>(q, d, krows, nk, st);
    default: return qk_rows_t<T, 8>(q, d, krows, nk, st);
  }
}

template <class T>
void pv_rows_dispatch(const float* pt, int64_t rows, int64_t nk, const void* const* vrows, int64_t dv,
                      const float* alpha, float* o) {
  switch (rows) {
    case 1: return pv_rows_t<T, 1>(pt, nk, vrows, dv, alpha, o);
    case 2: return pv_rows_t<T, 2>(pt, nk, vrows, dv, alpha, o);
    case 3: return pv_rows_t<T, 3>(pt, nk, vrows, dv, alpha, o);
    case 4: return pv_rows_t<T, 4>(pt, nk, vrows, dv, alpha, o);
    case 5: return pv_rows_t<T, 5>(pt, nk, vrows, dv, alpha, o);
    case 6: return pv_rows_t<T, 6>(pt, nk, vrows, dv, alpha, o);
    case 7: return pv_rows_t<T, 7>(pt, nk, vrows, dv, alpha, o);
    default: return pv_rows_t<T, 8>(pt, nk, vrows, dv, alpha, o);
  }
}

void qk_rows_avx2(const float* q, int64_t rows, int64_t d, const void* const* krows, DType t, int64_t nk, float* st) {
  if (t == DType::float32) return qk_rows_dispatch<float>(q, rows, d, krows, nk, st);
  if (t == DType::float8_e4m3) return qk_rows_dispatch<E4m3>(q, rows, d, krows, nk, st);
  if (t == DType::float16) return qk_rows_dispatch<Half>(q, rows, d, krows, nk, st);
  return qk_rows_dispatch<uint16_t>(q, rows, d, krows, nk, st);
}

void pv_rows_avx2(const float* pt, int64_t rows, int64_t nk, const void* const* vrows, DType t, int64_t dv,
                  const float* alpha, float* o) {
  if (t == DType::float32) return pv_rows_dispatch<float>(pt, rows, nk, vrows, dv, alpha, o);
  if (t == DType::float8_e4m3) return pv_rows_dispatch<E4m3>(pt, rows, nk, vrows, dv, alpha, o);
  if (t == DType::float16) return pv_rows_dispatch<Half>(pt, rows, nk, vrows, dv, alpha, o);
  return pv_rows_dispatch<uint16_t>(pt, rows, nk, vrows, dv, alpha, o);
}

// ---------------------------------------------------------------------------------------------
void convert_avx2(const void* src, DType t, int64_t stride, int64_t n, float* dst) {
  int64_t i = 0;
  if (stride == 1) {
    if (t == DType::float32) {
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    }
    if (t == DType::bfloat16) {
      const auto* s = static_cast<const uint16_t*>(src);
      for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
      }
    } else if (t == DType::float16) {
      const auto* s = static_cast<const uint16_t*>(src);
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
    } else if (t == DType::float8_e4m3) {
      const auto* s = static_cast<const E4m3*>(src);
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8<E4m3>(s + i));
    }
  }
  switch (t) {
    case DType::float32: {
      const auto* s = static_cast<const float*>(src);
      for (; i < n; ++i) dst[i] = s[i * stride];
      break;
    }
    case DType::float16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (; i < n; ++i) dst[i] = _cvtsh_ss(s[i * stride]);
      break;
    }
    case DType::bfloat16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (; i < n; ++i) {
        const uint32_t u = static_cast<uint32_t>(s[i * stride]) << 16;
        std::memcpy(dst + i, &u, 4);
      }
      break;
    }
    case DType::float8_e4m3: {
      const auto* s = static_cast<const uint8_t*>(src);
      const float* lut = e4m3_lut();
      for (; i < n; ++i) dst[i] = lut[s[i * stride]];
      break;
    }
    default: break;
  }
}


// ---------------------------------------------------------------------------------------------
// fp32 panel products (F32Panels, cpu_kernels.h) on AVX2. K / V are converted once per key tile
// (per (batch, kv head, key tile) where the driver keeps panels) into blocks of 8 keys (K) or 8
// value dims (V), so each inner step's broadcasts come from one contiguous 32-byte run and both
// panels stream through L1 in address order. The row-pointer kernels above broadcast from rows a
// whole row apart instead: pv touched a new cache line per key for every 4-dim block, and K / V
// were converted again for every query tile. The sums are the AVX-512 table's (two-level over
// the dims for S, per key tile for O): one FMA chain over all of d put fp32's rel-L2 above torch's
// (8.7e-7 vs 3.9e-7 at S 2048 D 64 on Zen 3, bench/cpu_peers.py, 2026-12-07).

// Bytes of one element of a floating storage dtype (no core/*.h helper here: top of this file).
inline int64_t storage_bytes(DType t) { return t == DType::float32 ? 4 : t == DType::float8_e4m3 ? 1 : 2; }

// Elements [c0, c0 + cnt) (cnt <= 8, the other lanes 0) of one storage row of dtype t, in fp32.
inline __m256 load_f32x8(const void* row, DType t, int64_t c0, int64_t cnt) {
  if (cnt == 8) {
    switch (t) {
      case DType::float32: return load8<float>(static_cast<const float*>(row) + c0);
      case DType::bfloat16: return load8<uint16_t>(static_cast<const uint16_t*>(row) + c0);
      case DType::float16: return load8<Half>(static_cast<const Half*>(row) + c0);
      case DType::float8_e4m3: return load8<E4m3>(static_cast<const E4m3*>(row) + c0);
      default: return _mm256_setzero_ps();
    }
  }
  alignas(32) float x[8] = {};
  convert_avx2(static_cast<const char*>(row) + c0 * storage_bytes(t), t, 1, cnt, x);
  return _mm256_load_ps(x);
}

inline void prefetch_storage_row(const void* row, DType t, int64_t n) {
  const int64_t bytes = n * storage_bytes(t);
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(static_cast<const char*>(row) + o, _MM_HINT_T0);
}

// In-register transpose of an 8 x 8 block (r[i] = row i on entry, column i on exit).
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// K panel kp [n8 / 8][dqk][8]: 8 keys x 8 dims per step through transpose8.
void pack_k_f32_avx2(const void* const* krows, DType t, int64_t n, int64_t dqk, float* kp) {
  for (int64_t j0 = 0; j0 < n; j0 += 8) {
    const int64_t nj = std::min<int64_t>(8, n - j0);
    for (int64_t j = j0 + 8; j < std::min(n, j0 + 16); ++j) prefetch_storage_row(krows[j], t, dqk);
    float* blk = kp + j0 * dqk;
    for (int64_t c0 = 0; c0 < dqk; c0 += 8) {
      const int64_t nd = std::min<int64_t>(8, dqk - c0);
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = i < nj ? load_f32x8(krows[j0 + i], t, c0, nd) : _mm256_setzero_ps();
      transpose8(r);
      for (int64_t d = 0; d < nd; ++d) _mm256_storeu_ps(blk + (c0 + d) * 8, r[d]);
    }
  }
}

// V panel vp [dv8 / 8][ld][8]: each row's 8-dim pieces into their blocks. Returns
// LowpKernels::kNonFinite when some V element is +-inf or NaN (x - x is NaN exactly there).
int pack_v_f32_avx2(const void* const* vrows, DType t, int64_t n, int64_t ld, int64_t dv, float* vp) {
  __m256 bad = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    if (j + 8 < n) prefetch_storage_row(vrows[j + 8], t, dv);
    for (int64_t c0 = 0; c0 < dv; c0 += 8) {
      const __m256 x = load_f32x8(vrows[j], t, c0, std::min<int64_t>(8, dv - c0));
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_sub_ps(x, x), _mm256_setzero_ps(), _CMP_NEQ_UQ));
      _mm256_storeu_ps(vp + (c0 / 8 * ld + j) * 8, x);
    }
  }
  return _mm256_movemask_ps(bad) ? LowpKernels::kNonFinite : 0;
}

// The register block of both panel products: c[n][v] = sum_{k < kn} b[8 k + n] a[k lda + 8 v]
// for n < NB, v < MV (b: a panel block, its 8-element run per step; a: Q^T or P^T rows), then
// by kMode: 0 out = c, 1 out += c, 2 out = alpha out + c (alpha per query).
// 12 accumulators + 3 row vectors + 1 broadcast fill the 16 ymm registers at NB 4, MV 3.
template <int NB, int MV, int kMode>
inline void panel_block(const float* a, int64_t lda, const float* b, int64_t kn, float* out, int64_t mp,
                        const float* alpha) {
  const __m256 zero = _mm256_setzero_ps();
  FA4_ACC_ALL(FA4_ACC_DECL)
  for (int64_t k = 0; k < kn; ++k) {
    FA4_LOAD_X(a + k * lda)
    const float* bk = b + k * 8;
    FA4_FMA_ROW(0, bk + 0)
    FA4_FMA_ROW(1, bk + 1)
    FA4_FMA_ROW(2, bk + 2)
    FA4_FMA_ROW(3, bk + 3)
    FA4_FMA_ROW(4, bk + 4)
    FA4_FMA_ROW(5, bk + 5)
    FA4_FMA_ROW(6, bk + 6)
    FA4_FMA_ROW(7, bk + 7)
  }
  if constexpr (kMode == 0) {
    FA4_STORE_ROW(0, out) FA4_STORE_ROW(1, out) FA4_STORE_ROW(2, out) FA4_STORE_ROW(3, out)
    FA4_STORE_ROW(4, out) FA4_STORE_ROW(5, out) FA4_STORE_ROW(6, out) FA4_STORE_ROW(7, out)
  } else {
    const __m256 a0 = kMode == 2 ? _mm256_loadu_ps(alpha) : zero;
    const __m256 a1 = kMode == 2 && MV > 1 ? _mm256_loadu_ps(alpha + 8) : zero;
    const __m256 a2 = kMode == 2 && MV > 2 ? _mm256_loadu_ps(alpha + 16) : zero;
    auto fin = [&](float* o, __m256 c, __m256 av) {
      const __m256 x = _mm256_loadu_ps(o);
      _mm256_storeu_ps(o, kMode == 2 ? _mm256_fmadd_ps(av, x, c) : _mm256_add_ps(x, c));
    };
#define FA4_FIN_ROW(n)                                              \
  if constexpr (NB > n) {                                           \
    fin(out + n * mp, c##n##0, a0);                                 \
    if constexpr (MV > 1) fin(out + n * mp + 8, c##n##1, a1);      \
    if constexpr (MV > 2) fin(out + n * mp + 16, c##n##2, a2);     \
  }
    FA4_ACC_ALL(FA4_FIN_ROW)
#undef FA4_FIN_ROW
  }
}

// S^T of 8 MV queries against keys [0, n) of the K panel, in chunks of dims each summed from 0
// and then added to st (the two-level sum of the AVX-512 table's qkp_block: 64 dims, 32 at
// D <= 64). MV 3 / 2 take each 8-key block as two 4-key halves (12 / 8 accumulators), MV 1 whole.
template <int MV>
void qkp_strip_avx2(const float* qt, int64_t mp, int64_t d, const float* kp, int64_t n, float* st) {
  const int64_t chunk = d <= 64 ? 32 : 64;
  constexpr int NB = MV == 1 ? 8 : 4;
  for (int64_t n0 = 0; n0 < n; n0 += 8) {
    for (int64_t h = 0; h < 8 && n0 + h < n; h += NB) {
      const float* kb = kp + n0 * d + h;
      float* out = st + (n0 + h) * mp;
      panel_block<NB, MV, 0>(qt, mp, kb, std::min(d, chunk), out, mp, nullptr);
      for (int64_t d0 = chunk; d0 < d; d0 += chunk)
        panel_block<NB, MV, 1>(qt + d0 * mp, mp, kb + d0 * 8, std::min(chunk, d - d0), out, mp, nullptr);
    }
  }
}

// Strips of 24 queries (the last one 16 or 8): each strip's Q^T stays in L1 while the K panel
// streams past it.
void qk_f32p_avx2(const float* qt, int64_t mp, int64_t m, int64_t dqk, const float* kp, int64_t n, float* st) {
  for (int64_t m0 = 0; m0 < m; m0 += 24) {
    const int64_t r = m - m0;
    if (r >= 24) qkp_strip_avx2<3>(qt + m0, mp, dqk, kp, n, st + m0);
    else if (r == 16) qkp_strip_avx2<2>(qt + m0, mp, dqk, kp, n, st + m0);
    else qkp_strip_avx2<1>(qt + m0, mp, dqk, kp, n, st + m0);
  }
}

// O^T rows of the V panel's dims x 8 MV queries: the tile's sum from 0, met with alpha O once.
template <int MV>
void pvp_strip_avx2(const float* pt, int64_t mp, int64_t n, const float* vp, int64_t ld, int64_t dv,
                    const float* alpha, float* ot) {
  constexpr int NB = MV == 1 ? 8 : 4;
  for (int64_t e0 = 0; e0 < dv; e0 += 8)
    for (int h = 0; h < 8; h += NB) panel_block<NB, MV, 2>(pt, mp, vp + e0 * ld + h, n, ot + (e0 + h) * mp, mp, alpha);
}

void pv_f32p_avx2(const float* pt, int64_t mp, int64_t m, int64_t n, const float* vp, int64_t ld, int64_t dv,
                  const float* alpha, float* ot) {
  for (int64_t m0 = 0; m0 < m; m0 += 24) {
    const int64_t r = m - m0;
    if (r >= 24) pvp_strip_avx2<3>(pt + m0, mp, n, vp, ld, dv, alpha + m0, ot + m0);
    else if (r == 16) pvp_strip_avx2<2>(pt + m0, mp, n, vp, ld, dv, alpha + m0, ot + m0);
    else pvp_strip_avx2<1>(pt + m0, mp, n, vp, ld, dv, alpha + m0, ot + m0);
  }
}

}  // namespace

const Kernels& avx2_kernels() {
  // (fp32 panels: 128-key tiles as the AVX-512 table's; strips of 24 queries, three vectors.)
  static const F32Panels f32p{128, 0, 24, pack_k_f32_avx2, pack_v_f32_avx2, qk_f32p_avx2, pv_f32p_avx2};
  static const Kernels k = [] {
    Kernels t{"avx2", 8, qk_avx2, pv_avx2, softmax_avx2, qk_rows_avx2, pv_rows_avx2, convert_avx2, nullptr, nullptr};
    t.f32p = &f32p;
    // softmax_avx2 flags extreme rows on its max pass (the panel path relies on it): the
    // row-major path's separate flag_extreme_rows pass over S (~3% of a decode's samples, perf
    // kv 1k, 1 thread) is left out.
    t.softmax_flags_extreme = true;
    return t;
  }();
  return k;
}

}  // namespace fa4::core::cpu
