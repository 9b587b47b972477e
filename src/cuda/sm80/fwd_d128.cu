// sm80 forward kernel instances for Dqk = Dv = 128 (fp16 and bf16, prefill and decode tiles).
#include "cuda/sm80/fwd_launch_impl.cuh"

namespace fa4::cuda::sm80 {
cudaError_t launch_fwd_d128(const FwdArgs& p, bool bf16, Tile tile, dim3 grid, cudaStream_t stream) {
  return launch_dims<128, 128>(p, bf16, tile, grid, stream);
}
}  // namespace fa4::cuda::sm80
