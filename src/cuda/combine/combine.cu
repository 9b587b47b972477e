// The split-KV combine kernel: one warp per (row, head) (combine_row.cuh: the lanes reduce the
// split lse, then accumulate the weighted partials with all splits' loads in flight). Memory-bound
// and small next to the attention itself (splits x Dv x 4 bytes read per output row), so it is
// kept simple and generic in its strides: the same kernel serves
// the internal split-KV merge and the public combine_partials on device tensors.
#include "cuda/combine/combine.h"
#include "cuda/combine/combine_row.cuh"

namespace fa4::cuda {
namespace {

constexpr int kWarps = 4;

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
  const float lse = combine_row_warp(lp, a.lp_s, op, a.op_s, a.splits, a.dv, a.out, b * a.o_b + i * a.o_i + h * a.o_h,
                                     a.out_dtype);
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
