// The split-KV merge, shared by the forward pass (its own splits) and combine_partials:
//   lse = log sum_s exp(lse_s),   O = sum_s exp(lse_s - lse) O_s
// A partial with lse_s = -inf saw nothing and has weight exactly 0 (its O_s is never read, so it
// may hold anything). All partials -inf: O = 0, lse = -inf. A NaN lse poisons the row.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace fa4::core::cpu {

// Products with a factor that is > 0 in exact arithmetic but underflowed to 0 in fp32: a
// visible key's weight p = exp(s - m), a rescale factor alpha = exp(m_old - m_new), a split's
// merge weight exp(lse_s - lse). An infinite V (or O) then still counts: inf, not 0 * inf = NaN
// (fuzz findings: an fp16 -inf in V behind a score ~300 below the row max gave NaN where the
// reference gives -inf). NaN stays NaN; finite values times 0 stay 0.
template <typename T>
inline T exact_product(T p, T v) { return p == T(0) && std::isinf(v) ? v : p * v; }
template <typename T>
inline T exact_scale(T o, T alpha) { return alpha == T(0) && std::isinf(o) ? o : o * alpha; }

// Returns the merged lse (natural log) and writes the merged row to acc[0..dv).
// Partial s, element e lives at o[s * o_split_stride + e * o_dim_stride]; its lse at
// lse[s * lse_stride].
// exact (the forward pass's own splits): a partial with a finite lse_s has weight > 0 even where
// exp(lse_s - lse) underflows, so its +-inf / NaN elements reach the result (exact_product), as
// they do in the fp64 reference's single pass; only lse_s = -inf (saw nothing) is skipped.
// Without it (combine_partials, whose reference skips any weight that is 0 in fp64) every weight
// that is 0 in fp32 is skipped.
// Each partial is scaled by its normalized weight w_s / sum_s w_s before the sum, so no partial
// sum exceeds max |O_s| by more than the weights' rounding; with partials within a few ulps of
// FLT_MAX that rounding can still give +-inf where the exact merge is finite. T = double (the
// caller's fallback for a non-finite fp32 result) computes as the fp64 reference does.
template <typename T>
inline float merge_partial_row_t(int64_t splits, const float* lse, int64_t lse_stride, const float* o,
                                 int64_t o_split_stride, int64_t o_dim_stride, int64_t dv, T* acc, bool exact = false) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  T m = kNegInf;
  bool nan = false;
  for (int64_t s = 0; s < splits; ++s) {
    const T x = lse[s * lse_stride];
    nan |= std::isnan(x);
    m = x > m ? x : m;
  }
  for (int64_t e = 0; e < dv; ++e) acc[e] = T(0);
  if (nan) {
    for (int64_t e = 0; e < dv; ++e) acc[e] = std::numeric_limits<T>::quiet_NaN();
    return std::numeric_limits<float>::quiet_NaN();
  }
  if (m == kNegInf) return -std::numeric_limits<float>::infinity();
  T denom = T(0);
  for (int64_t s = 0; s < splits; ++s) denom += std::exp(T(lse[s * lse_stride]) - m);  // +inf - +inf = NaN, as IEEE
  const T inv = T(1) / denom;
  for (int64_t s = 0; s < splits; ++s) {
    const T x = lse[s * lse_stride], w = std::exp(x - m);
    if (w == T(0) && (!exact || x == kNegInf)) continue;  // saw nothing (or negligible): its O_s is not read
    const T ws = w * inv;
    const float* os = o + s * o_split_stride;
    if (exact)
      for (int64_t e = 0; e < dv; ++e) acc[e] += exact_product(ws, T(os[e * o_dim_stride]));
    else
      for (int64_t e = 0; e < dv; ++e) acc[e] += ws * T(os[e * o_dim_stride]);
  }
  return static_cast<float>(m + std::log(denom));
}

inline float merge_partial_row(int64_t splits, const float* lse, int64_t lse_stride, const float* o,
                               int64_t o_split_stride, int64_t o_dim_stride, int64_t dv, float* acc,
                               bool exact = false) {
  return merge_partial_row_t<float>(splits, lse, lse_stride, o, o_split_stride, o_dim_stride, dv, acc, exact);
}

}  // namespace fa4::core::cpu
