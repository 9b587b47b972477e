// sm90 forward kernel instance for all-fp8 Dqk = Dv = 64 with 160-key tiles (Tile::fp8_long_keys:
// three consumers, e4m3 q / k, V^T in 32-key chunks, bf16 out), for long key sequences
// (FA4_SM90_FP8_LONG_KEYS_MIN_SK).
#include "cuda/sm90/fwd_launch_impl.cuh"

namespace fa4::cuda::sm90 {
cudaError_t launch_fwd_d64_fp8_long_keys(const Sm90Params& P, dim3 grid, cudaStream_t stream) {
  return launch_instance<__nv_fp8_e4m3, 64, 64, Tile::fp8_long_keys>(P, grid, stream);
}
}  // namespace fa4::cuda::sm90
