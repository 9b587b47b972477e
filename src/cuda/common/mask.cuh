// Mask building blocks of the GPU kernels: the per-row visible-key interval in 32-bit arithmetic
// and the "does this key tile need per-element masking" test derived from it.
//
// Same definition as core::SeqMask (src/core/mask.h), restated in 32 bits: positions of one
// sequence are < 2^31 on the cuda backend (cuda_check), and the int64 SeqMask would pull a 64-bit
// division routine into the partial-tile path.
#pragma once

#include <cstdint>

#include "core/mask.h"
#include "cuda/common/seq_info.cuh"

namespace fa4::cuda {

struct RowMask32 {
  int left, right, chunk, off, sk;
  __device__ __forceinline__ void init(const core::Mask& m, int64_t sq, int sk_) {
    const int64_t big = 1 << 30;
    left = m.left < 0 ? -1 : static_cast<int>(m.left < big ? m.left : big);
    right = m.right < 0 ? -1 : static_cast<int>(m.right < big ? m.right : big);
    chunk = static_cast<int>(m.chunk < big ? m.chunk : big);
    sk = sk_;
    off = static_cast<int>(clamp64(sk_ - sq, -big, big));
  }
  // Visible keys of query row i: [lo, hi), clamped to [0, sk].
  __device__ __forceinline__ void bounds(int64_t i64, int& lo, int& hi) const {
    const int i = static_cast<int>(i64 < (1 << 30) ? i64 : (1 << 30));
    const int p = i + off;
    lo = 0;
    if (left >= 0 && p - left > lo) lo = p - left;
    if (chunk > 0) {
      const int q = p >= 0 ? p / chunk : -((-p + chunk - 1) / chunk);  // floor division
      if (q * chunk > lo) lo = q * chunk;
    }
    hi = sk;
    if (right >= 0 && p + right + 1 < hi) hi = p + right + 1;
    if (hi < 0) hi = 0;
    if (lo > sk) lo = sk;
  }
};

// Keys [full_lo, full_hi) are visible to every query row in [i_first, i_last]: a key tile
// [n0, n0 + n) inside that range needs no per-element mask. Row bounds never decrease with i
// (causal, window, chunk), so this is lo(i_last) .. hi(i_first): two compares per tile.
struct FullKeyRange {
  int lo = 0, hi = 0;
  __device__ __forceinline__ void init(const RowMask32& rm, int64_t i_first, int64_t i_last) {
    int a, b;
    rm.bounds(i_last, a, b);
    lo = a;
    rm.bounds(i_first, a, b);
    hi = b;
  }
  __device__ __forceinline__ bool needs_mask(int n0, int n) const { return n0 < lo || n0 + n > hi; }
};

}  // namespace fa4::cuda
