// sm90 forward kernel instances for Dqk = Dv = 256 with 80-key tiles (Tile::long_keys,
// fwd_config.h: long key sequences), fp16 and bf16.
#include "cuda/sm90/fwd_launch_impl.cuh"

namespace fa4::cuda::sm90 {
cudaError_t launch_fwd_d256_long_keys(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream) {
  return launch_dims<256, 256, Tile::long_keys>(P, bf16, grid, stream);
}
}  // namespace fa4::cuda::sm90
