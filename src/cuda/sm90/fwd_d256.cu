// sm90 forward kernel instances for Dqk = Dv = 256 (fp16 and bf16).
#include "cuda/sm90/fwd_launch_impl.cuh"

namespace fa4::cuda::sm90 {
cudaError_t launch_fwd_d256(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream) {
  return launch_dims<256>(P, bf16, grid, stream);
}
// ... and its gather instances (fwd_gather.h, FA4_SM90_PAGED_GATHER: paged K / V by cp.async).
cudaError_t launch_fwd_d256_gather(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream) {
  return launch_gather_dims<256, Tile::standard>(P, bf16, grid, stream);
}
}  // namespace fa4::cuda::sm90
