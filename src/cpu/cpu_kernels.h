// The inner kernels of the cpu backend, behind a table of function pointers so one driver
// (cpu_backend.cpp) runs on any CPU: the AVX2+FMA table (cpu_kernels_avx2.cpp) where the CPU
// has it, the portable table (cpu_kernels_generic.cpp) otherwise.
//
// Tile layout: everything the kernels touch is "transposed", queries along the fast axis.
// One tile holds mp packed query rows (mp a multiple of 8 = one AVX2 vector of fp32):
//   qt [Dqk][mp]   Q^T, prescaled (scale, descales)
//   st [nk][mp]    S^T = K Q^T, then P^T in place after the softmax step
//   ot [Dv][mp]    O^T, unnormalized accumulator
//   m, l, alpha    [mp] running max (natural units), running sum, last rescale factor
// K and V keep their natural row-major form ([key][dim]; converted to contiguous fp32 per tile
// for these kernels, read in place by the row-major ones) and are addressed through one pointer
// per key row, so paged and strided layouts need no special case. With queries on the vector
// axis, K and V elements are broadcast (one load-op each) and the softmax reduces over keys
// with plain vertical vector ops — no horizontal sums, no transposes of K or V.
#pragma once

#include <cstdint>

#include "fa4/tensor.h"

namespace fa4::core::cpu {

// Every kernel works on m query rows (a multiple of 8) starting at the pointers it is given,
// inside tiles whose row stride is mp: partial tiles pass only the rows that can see any key of
// the tile (the others would be fully masked, an exact no-op).

// One online-softmax step over a tile of S^T.
struct SoftmaxStep {
  float* st;       // [nk][mp] in: scores (natural units, before softcap), out: P^T
  int64_t nk, mp, m;
  // Partial tiles: key n (0-based in the tile) is visible to row m iff lo[m] <= n < hi[m].
  // nullptr = every element visible (full tile).
  const int32_t* lo;
  const int32_t* hi;
  float softcap_in;   // 1 / softcap (at most FLT_MAX); 0 = no softcap
  float softcap_out;  // softcap
  float* m_run;       // [mp] running max, natural units (-inf before the first key)
  float* l_run;       // [mp] running sum of exp(s - m) = 2^((s - m) log2 e)
  float* alpha;       // [mp] out: exp(m_old - m_new), the factor O must be rescaled by
};

struct Kernels {
  const char* name;
  // st[n][i] = sum_d krows[n][d] * qt[d][i]   for n < nk, i < m.
  void (*qk)(const float* qt, int64_t mp, int64_t m, int64_t d, const float* const* krows, int64_t nk, float* st);
  // ot[e][i] = alpha[i] * ot[e][i] + sum_n vrows[n][e] * pt[n][i]   for e < dv, i < m.
  void (*pv)(const float* pt, int64_t mp, int64_t m, int64_t nk, const float* const* vrows, int64_t dv,
             const float* alpha, float* ot);
  void (*softmax)(const SoftmaxStep& s);
  // Row-major variants for tiles of at most 8 query rows (decode, small GQA groups), reading K
  // and V straight from their storage (any floating dtype, rows with unit stride, dims multiple
  // of 8): each K/V element is loaded once and feeds all `rows` queries from registers, where
  // the transposed kernels above would spend one broadcast per element on 8 mostly padded rows.
  // nullptr in tables that do not have them.
  //   q [rows][d] prescaled queries;  st [nk][8] as above (rows >= `rows` get 0)
  void (*qk_rows)(const float* q, int64_t rows, int64_t d, const void* const* krows, DType t, int64_t nk,
                  float* st);
  //   o [rows][dv]:  o[r][e] = alpha[r] * o[r][e] + sum_n pt[n][r] * vrows[n][e]   (pt as st)
  void (*pv_rows)(const float* pt, int64_t rows, int64_t nk, const void* const* vrows, DType t, int64_t dv,
                  const float* alpha, float* o);
  // dst[i] = (float) src[i * stride], i < n, for a floating storage dtype.
  void (*convert)(const void* src, DType t, int64_t stride, int64_t n, float* dst);
};

const Kernels& generic_kernels();
#if defined(__x86_64__) || defined(_M_X64)
const Kernels& avx2_kernels();  // only call when the CPU has AVX2 and FMA (and F16C)
#endif

// e4m3 byte -> fp32 for all 256 codes (NaN codes included).
const float* e4m3_lut();

// The best table for this CPU (decided once).
const Kernels& best_kernels();

}  // namespace fa4::core::cpu
