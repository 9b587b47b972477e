#include "cuda/common/row_copy.h"

#include <cuda_runtime.h>

namespace fa4::cuda {
namespace {

// One warp per row, grid-stride over rows. The strided offset of row r comes from its digits in
// the leading shape (innermost last): int64 divisions, done once per row -- per element they made
// the copy compute-bound (~50 GB/s: staging cost 3-15x the attention itself on the H200,
// bench/staged_rows_cost.py at 6b974b8). The lanes then walk the row's columns: consecutive lanes,
// consecutive elements (coalesced on the packed side, and on the strided side when its last
// stride is 1).
template <class E>
__global__ void row_copy_kernel(RowCopy c) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x >> 5);
  const int64_t cols = c.gather ? c.pitch : c.d;  // a gather also zeroes the pad columns
  for (int64_t r = blockIdx.x * int64_t{blockDim.x >> 5} + (threadIdx.x >> 5); r < c.rows; r += warps) {
    int64_t base = 0, rest = r;
    for (int i = c.lead - 1; i >= 0; --i) {
      base += (rest % c.shape[i]) * c.stride[i];
      rest /= c.shape[i];
    }
    const int64_t packed = r * c.pitch;
    for (int64_t col = lane; col < cols; col += 32) {
      if (c.gather)
        static_cast<E*>(c.dst)[packed + col] = col < c.d ? static_cast<const E*>(c.src)[base + col * c.last_stride] : E{};
      else
        static_cast<E*>(c.dst)[base + col * c.last_stride] = static_cast<const E*>(c.src)[packed + col];
    }
  }
}

struct B1 { uint8_t v; };
struct B2 { uint16_t v; };
struct B4 { uint32_t v; };

}  // namespace

int launch_row_copy(const RowCopy& c, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (c.rows <= 0 || c.d <= 0) return static_cast<int>(cudaSuccess);
  const int threads = 256;  // 8 rows per block and pass
  const int64_t blocks = (c.rows + 7) / 8;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);  // grid-stride beyond
  switch (c.elem) {
    case 1: row_copy_kernel<B1><<<grid, threads, 0, stream>>>(c); break;
    case 2: row_copy_kernel<B2><<<grid, threads, 0, stream>>>(c); break;
    case 4: row_copy_kernel<B4><<<grid, threads, 0, stream>>>(c); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace fa4::cuda
