#include "cuda/common/row_copy.h"

#include <cuda_runtime.h>

namespace fa4::cuda {
namespace {

// One warp per run of kRunRows consecutive rows, grid-stride over runs; the rows' strided offsets
// from a RowWalk (divisions once per run: per element, then per row, they made the copy
// compute-bound -- H200, bench/staged_rows_cost.py: the staged call's overhead grew with the row
// count, ~1 ms per 2.6M rows). The lanes walk a row's columns: consecutive lanes, consecutive
// elements (coalesced on the packed side, and on the strided side when its last stride is 1).
constexpr int64_t kRunRows = 32;

template <class E>
__global__ void row_copy_kernel(RowCopy c) {
  const int lane = threadIdx.x & 31;
  const int64_t runs = (c.rows + kRunRows - 1) / kRunRows;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x >> 5);
  const int64_t cols = c.gather ? c.pitch : c.d;  // a gather also zeroes the pad columns
  for (int64_t run = blockIdx.x * int64_t{blockDim.x >> 5} + (threadIdx.x >> 5); run < runs; run += warps) {
    const int64_t r0 = run * kRunRows, r1 = r0 + kRunRows < c.rows ? r0 + kRunRows : c.rows;
    RowWalk walk(c, r0);
    for (int64_t r = r0; r < r1; ++r, walk.next(c)) {
      const int64_t packed = r * c.pitch;
      for (int64_t col = lane; col < cols; col += 32) {
        if (c.gather)
          static_cast<E*>(c.dst)[packed + col] =
              col < c.d ? static_cast<const E*>(c.src)[walk.offset + col * c.last_stride] : E{};
        else
          static_cast<E*>(c.dst)[walk.offset + col * c.last_stride] = static_cast<const E*>(c.src)[packed + col];
      }
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
  const int threads = 256;  // 8 runs of rows per block and pass
  const int64_t blocks = (c.rows + 8 * kRunRows - 1) / (8 * kRunRows);
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
