// sm80 fp8 instances for (Dqk, Dv) = (128, 128): e4m3 K / V under bf16 / fp16 q, and all-e4m3 q / k / v.
#include "cuda/sm80/fwd_launch_fp8_impl.cuh"

namespace fa4::cuda::sm80 {
cudaError_t launch_fwd_fp8_d128(const FwdArgsFp8& p, Fp8 mode, bool bf16, Tile tile, dim3 grid, cudaStream_t stream) {
  return launch_fp8_dims<128, 128>(p, mode, bf16, tile, grid, stream);
}
}  // namespace fa4::cuda::sm80
