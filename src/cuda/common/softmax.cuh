// Online-softmax building blocks shared by the GPU kernels (log2 domain: a score s enters as
// x = s * scale * log2(e), so every exponential is one ex2).
//
// Row state of one query row: running max m (in the units the kernel keeps, see `sc` in the
// kernels) and running sum l of 2^(x - m). Both the mma.sync (sm80) and the wgmma (sm90)
// accumulator layouts give a row's columns to the 4 lanes of a quad, so row reductions are two
// xor-shuffles.
#pragma once

#include <cmath>

#include "cuda/ptx/sm80_ptx.cuh"

namespace fa4::cuda {

// Rescaling: the running max m moves when some row's new max exceeds it by more than the
// threshold (log2 units); the kernels skip the O / l rescale of a warp none of whose rows moved.
// FA4's threshold (8: P <= 2^8, safe in fp32) keeps m stale, and then costs accuracy: P of the
// row's largest scores, 2^(x - m) with a fractional x - m, is rounded to 16 bits where with an
// exact max the largest P is exactly 1 (2^k scales round identically; other scales do not).
// Measured on the H200 (bench/accuracy.py, D = 128, S = 2k, normal inputs; docs/perf/sm90-notes.md):
// threshold 8 gave max-abs 1.36x (bf16) / 1.93x (fp16) of cuDNN's and FA3's, threshold 0 the same
// error as both, for 1-5 % of speed. DESIGN §4 asks for no more error than cuDNN: 0 by default.
#ifndef FA4_RESCALE_THRESHOLD
#define FA4_RESCALE_THRESHOLD 0
#endif
constexpr float kRescaleThreshold = FA4_RESCALE_THRESHOLD;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// True when the row's max must move now: it grew by more than the threshold, or the row saw its
// first visible key. mx_tile, m_run in the kernel's units; sc converts them to log2 units.
__device__ __forceinline__ bool rescale_needed(float mx_tile, float m_run, float sc) {
  return (mx_tile - m_run) * sc > kRescaleThreshold || (m_run == -INFINITY && mx_tile != -INFINITY);
}

// The end of a row: fold the sink logit into (m, l), then the factor that normalizes O and the
// row's lse (natural log). m2 = the row max in log2 units (-inf: no visible key), l = the full
// (quad-reduced) sum, sink2 = the sink logit in log2 units or -inf for none.
// Empty row (no visible key, no sink): l == 0 -> scale 0 (O = 0), lse = -inf. A row that met a
// NaN score (a NaN input, or inf - inf from an infinite one) has l = NaN: its lse is NaN (as the
// reference's) and its O is NaN already (the NaN weight reached P V), scale 0 keeps it NaN. Split
// partials carry that NaN lse into the merge (combine_row.cuh), which then makes the row NaN.
struct RowFinal {
  float scale;  // multiply O by this
  float lse;    // natural log
};
__device__ __forceinline__ RowFinal finalize_row(float m2, float l, float sink2) {
  float f = 1.f;  // rescale of O and l for the sink
  if (sink2 != -INFINITY) {
    const float mx = fmaxf(m2, sink2);
    f = ptx::exp2_approx(m2 - mx);
    l = l * f + ptx::exp2_approx(sink2 - mx);
    m2 = mx;
  }
  RowFinal r;
  r.scale = l > 0.f ? f / l : 0.f;
  r.lse = l > 0.f ? (m2 + __log2f(l)) * kLn2 : l == 0.f ? -INFINITY : l;
  return r;
}

}  // namespace fa4::cuda
