// The split-KV merge of one (row, head) by one warp, for the combine kernel (combine.cu), and the
// output store shared with the sm90 kernel's in-kernel merge (sm90/fwd_epilogue.cuh, whose
// rows are few and merged by a thread per row piece instead):
//   lse = log sum_s exp(lse_s),   O = sum_s exp(lse_s - lse) * O_s
// A row whose split lse are all -inf (no split saw a key) gets O = 0, lse = -inf.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "fa4/tensor.h"

namespace fa4::cuda {

__device__ __forceinline__ void store_out(void* base, int64_t off, int32_t dtype, float x) {
  switch (static_cast<DType>(dtype)) {
    case DType::float16: static_cast<__half*>(base)[off] = __float2half_rn(x); break;
    case DType::bfloat16: static_cast<__nv_bfloat16*>(base)[off] = __float2bfloat16_rn(x); break;
    default: static_cast<float*>(base)[off] = x; break;
  }
}

// The merged lse of a row and whether it is empty, from its splits' lse (split s at lp + s *
// lp_s): the max, then the sum in split order. Every merge computes it this way -- each lane of
// the combine kernel's warp, each thread of the sm90 kernel's in-kernel merge --, and every
// weight exp(lse_s - lse) and partial sum (merge_term) the same way, so a split call gives the
// same bits whichever merges it (the in-kernel merge falls back to the combine kernel when the
// stream's counters cannot be had). (L2 loads: in the sm90 kernel, rows other CTAs wrote in this
// launch.) Empty: every split saw nothing (sum 0). A NaN partial lse (a split whose row met a
// NaN score, finalize_row) makes sum and the merged lse NaN, every weight NaN, the row NaN: as
// the reference. (Testing !(sum > 0) dropped such rows as empty: finite or 0 where the reference
// is NaN, whenever the NaN key fell in one split of several.)
//
// The loads go in batches of kMergeBatch splits, each split's index clamped to the last one, so a
// batch's loads carry no branch and are in flight together: one L2 round trip per batch. (A plain
// loop over the splits compiled to a loop-exit branch between every split's load and its use --
// the loads are .cg, never moved past a branch --, one round trip per split: 14 splits x 4 row
// passes ~ 22 us at the end of a B 1 decode with 64 packed rows, H100 2026-12-05.)
constexpr int kMergeBatch = 8;
__device__ __forceinline__ int merge_split(int s0, int j, int splits) { return s0 + j < splits ? s0 + j : splits - 1; }
__device__ __forceinline__ float merged_lse(const float* lp, int64_t lp_s, int splits, bool* empty) {
  float mx = -INFINITY;
  for (int s0 = 0; s0 < splits; s0 += kMergeBatch) {
    float x[kMergeBatch];
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) x[j] = __ldcg(lp + merge_split(s0, j, splits) * lp_s);
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) mx = fmaxf(mx, x[j]);  // (the repeated last split moves no max)
  }
  const float m_use = mx == -INFINITY ? 0.f : mx;
  float sum = 0.f;
  for (int s0 = 0; s0 < splits; s0 += kMergeBatch) {
    float x[kMergeBatch];
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) x[j] = __ldcg(lp + merge_split(s0, j, splits) * lp_s);
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j)
      if (s0 + j < splits) sum += __expf(x[j] - m_use);  // in split order
  }
  *empty = sum == 0.f;
  return *empty ? -INFINITY : m_use + __logf(sum);
}
// acc + w x, where a split that saw nothing (w = 0) adds nothing -- not even 0 x NaN from its
// unused row. One rounding (an explicit fma): the same bits in every merge.
__device__ __forceinline__ float merge_term(float acc, float w, float x) { return w != 0.f ? __fmaf_rn(w, x, acc) : acc; }

// lp: split 0's lse of the row (split s at lp + s * lp_s); op: split 0's O row (column d at
// op + s * op_s + d); out: column d at out + d (elements of out_dtype). Returns the merged lse
// (the same value in every lane). Every lane of the warp calls it with the same arguments.
__device__ __forceinline__ float combine_row_warp(const float* lp, int64_t lp_s, const float* op, int64_t op_s, int splits,
                                                  int dv, void* out, int64_t out_off, int32_t out_dtype) {
  const int lane = threadIdx.x & 31;
  bool empty;
  const float lse = merged_lse(lp, lp_s, splits, &empty);  // (every lane: the loads broadcast)

  // O = sum_s w_s O_s, w_s = exp(lse_s - lse): lane j of a 32-split chunk computes w_j once and
  // the warp broadcasts it; each lane owns kCols columns of a pass (lane + 32 c: every load of
  // the warp is 128 contiguous bytes), and the loads of a split (and of the next ones, unrolled)
  // are independent of the sums, so they are in flight together. (The first form looped the
  // splits one column at a time behind a branch on w: one dependent load after another, ~21 us
  // for a decode row of 14 splits on the H200 -- as long as the attention kernel before it.)
  constexpr int kCols = 8;
  for (int d0 = 0; d0 < dv; d0 += 32 * kCols) {
    float acc[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[c] = 0.f;
    for (int s0 = 0; s0 < splits && !empty; s0 += 32) {
      const int s = s0 + lane;
      const float w_lane = s < splits ? __expf(lp[s * lp_s] - lse) : 0.f;
      const int count = splits - s0 < 32 ? splits - s0 : 32;
      // kBatch splits' columns in flight together (indices clamped to the chunk's last split;
      // past it the broadcast weight is that of a lane past the splits, 0, which merge_term
      // skips): see merged_lse on why not a plain loop.
      constexpr int kBatch = 4;
      for (int j0 = 0; j0 < count; j0 += kBatch) {
        float x[kBatch][kCols];
#pragma unroll
        for (int jj = 0; jj < kBatch; ++jj) {
          const float* src = op + (s0 + (j0 + jj < count ? j0 + jj : count - 1)) * op_s;
#pragma unroll
          for (int c = 0; c < kCols; ++c) {
            const int d = d0 + lane + 32 * c;
            x[jj][c] = d < dv ? src[d] : 0.f;
          }
        }
#pragma unroll
        for (int jj = 0; jj < kBatch; ++jj) {
          const float w = __shfl_sync(0xffffffffu, w_lane, j0 + jj);  // (j0 + jj <= 31: count <= 32)
#pragma unroll
          for (int c = 0; c < kCols; ++c) acc[c] = merge_term(acc[c], w, x[jj][c]);
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int d = d0 + lane + 32 * c;
      if (d < dv) store_out(out, out_off + d, out_dtype, acc[c]);
    }
  }
  return lse;
}

}  // namespace fa4::cuda
