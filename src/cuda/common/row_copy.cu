#include "cuda/common/row_copy.h"

#include <cuda_runtime.h>

namespace fa4::cuda {
namespace {

// One thread per packed element, grid-stride. The strided offset of row r comes from its digits
// in the leading shape (innermost last). Memory-bound; the division per element is the price of
// handling any rank / stride in one kernel (this path only serves layouts the fast kernels refuse).
template <class E>
__global__ void row_copy_kernel(RowCopy c) {
  const int64_t cols = c.gather ? c.pitch : c.d;
  const int64_t total = c.rows * cols;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total; idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / cols, col = idx % cols;
    const int64_t packed = r * c.pitch + col;
    if (c.gather && col >= c.d) {
      static_cast<E*>(c.dst)[packed] = E{};
      continue;
    }
    int64_t off = col * c.last_stride, rest = r;
    for (int i = c.lead - 1; i >= 0; --i) {
      off += (rest % c.shape[i]) * c.stride[i];
      rest /= c.shape[i];
    }
    if (c.gather) static_cast<E*>(c.dst)[packed] = static_cast<const E*>(c.src)[off];
    else static_cast<E*>(c.dst)[off] = static_cast<const E*>(c.src)[packed];
  }
}

struct B1 { uint8_t v; };
struct B2 { uint16_t v; };
struct B4 { uint32_t v; };

}  // namespace

int launch_row_copy(const RowCopy& c, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t total = c.rows * (c.gather ? c.pitch : c.d);
  if (total <= 0) return static_cast<int>(cudaSuccess);
  const int threads = 256;
  const int64_t blocks = (total + threads - 1) / threads;
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
