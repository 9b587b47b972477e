// sm90 forward kernel instance for all-fp8 Dqk = Dv = 128 (Tile::fp8: e4m3 q / k / V^T, bf16 out).
#include "cuda/sm90/fwd_launch_impl.cuh"

namespace fa4::cuda::sm90 {
cudaError_t launch_fwd_d128_fp8(const Sm90Params& P, dim3 grid, cudaStream_t stream) {
  return launch_instance<__nv_fp8_e4m3, 128, 128, Tile::fp8>(P, grid, stream);
}
}  // namespace fa4::cuda::sm90
