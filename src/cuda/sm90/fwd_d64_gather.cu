// sm90 forward kernel gather instance (fwd_gather.h: paged K / V by cp.async) for Dqk = Dv =
// 64 on the two-consumer (short_masked) tile, fp16 and bf16.
#include "cuda/sm90/fwd_gather_launch.h"
#include "cuda/sm90/fwd_launch_impl.cuh"

namespace fa4::cuda::sm90 {
cudaError_t launch_fwd_d64_gather(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream) {
  return launch_gather_dims<64, Tile::short_masked>(P, bf16, grid, stream);
}
}  // namespace fa4::cuda::sm90
