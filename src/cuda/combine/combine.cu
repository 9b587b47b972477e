// The split-KV combine kernel: one warp per (row, head); the lanes first reduce the split lse
// (max, then sum of exponentials), then each lane owns every 32nd column and accumulates the
// weighted partials, all splits' loads in flight together. Memory-bound and small next to the attention itself (splits x Dv x 4 bytes
// read per output row), so it is kept simple and generic in its strides: the same kernel serves
// the internal split-KV merge and the public combine_partials on device tensors.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "cuda/combine/combine.h"
#include "fa4/tensor.h"

namespace fa4::cuda {
namespace {

constexpr int kWarps = 4;

__device__ __forceinline__ void store_out(void* base, int64_t off, int32_t dtype, float x) {
  switch (static_cast<DType>(dtype)) {
    case DType::float16: static_cast<__half*>(base)[off] = __float2half_rn(x); break;
    case DType::bfloat16: static_cast<__nv_bfloat16*>(base)[off] = __float2bfloat16_rn(x); break;
    default: static_cast<float*>(base)[off] = x; break;
  }
}

__global__ void __launch_bounds__(32 * kWarps) combine_kernel(const __grid_constant__ CombineArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (item >= a.rows * a.heads) return;
  const int64_t r = item / a.heads;
  if (a.row_limit != nullptr && r >= *a.row_limit) return;
  const int h = static_cast<int>(item % a.heads);
  const int64_t b = r / a.rows_per_b, i = r % a.rows_per_b;
  // An empty partials view (no splits, or Dv = 0 for o_part) may carry any strides: no offset
  // is formed from them (fa4_combine_partials accepts S = 0: nothing seen, O = 0, lse = -inf).
  const float* lp = a.splits > 0 ? a.lse_part + (b * a.lp_b + i * a.lp_i + h * a.lp_h) : a.lse_part;
  const float* op = a.splits > 0 && a.dv > 0 ? a.o_part + (b * a.op_b + i * a.op_i + h * a.op_h) : a.o_part;

  float mx = -INFINITY;
  for (int s = lane; s < a.splits; s += 32) mx = fmaxf(mx, lp[s * a.lp_s]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float m_use = mx == -INFINITY ? 0.f : mx;
  float sum = 0.f;
  for (int s = lane; s < a.splits; s += 32) sum += __expf(lp[s * a.lp_s] - m_use);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const bool empty = !(sum > 0.f);
  const float lse = empty ? -INFINITY : m_use + __logf(sum);

  // O = sum_s w_s O_s, w_s = exp(lse_s - lse): lane j of a 32-split chunk computes w_j once and
  // the warp broadcasts it; each lane owns kCols columns of a pass (lane + 32 c: every load of
  // the warp is 128 contiguous bytes), and the loads of a split (and of the next ones, unrolled)
  // are independent of the sums, so they are in flight together. (The first form looped the
  // splits one column at a time behind a branch on w: one dependent load after another, ~21 us
  // for a decode row of 14 splits on the H200 -- as long as the attention kernel before it.)
  constexpr int kCols = 8;
  for (int d0 = 0; d0 < a.dv; d0 += 32 * kCols) {
    float acc[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[c] = 0.f;
    for (int s0 = 0; s0 < a.splits && !empty; s0 += 32) {
      const int s = s0 + lane;
      const float w_lane = s < a.splits ? __expf(lp[s * a.lp_s] - lse) : 0.f;
      const int count = a.splits - s0 < 32 ? a.splits - s0 : 32;
#pragma unroll 4
      for (int j = 0; j < count; ++j) {
        const float w = __shfl_sync(0xffffffffu, w_lane, j);
        const float* src = op + (s0 + j) * a.op_s;
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
          const int d = d0 + lane + 32 * c;
          const float x = d < a.dv ? src[d] : 0.f;
          acc[c] += w != 0.f ? w * x : 0.f;  // a split that saw nothing adds nothing (not even 0 * NaN)
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int d = d0 + lane + 32 * c;
      if (d < a.dv) store_out(a.out, b * a.o_b + i * a.o_i + h * a.o_h + d, a.out_dtype, acc[c]);
    }
  }
  if (lane == 0 && a.lse != nullptr) a.lse[b * a.l_b + i * a.l_i + h * a.l_h] = lse;
}

}  // namespace

cudaError_t launch_combine(const CombineArgs& a, cudaStream_t stream) {
  const int64_t items = a.rows * a.heads;
  if (items == 0) return cudaSuccess;
  const int64_t blocks = (items + kWarps - 1) / kWarps;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  combine_kernel<<<static_cast<unsigned>(blocks), 32 * kWarps, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace fa4::cuda
