// sm80 forward kernel instances for Dqk = Dv = 256 (fp16 and bf16; prefill, decode and compact tiles).
#include "cuda/sm80/fwd_launch_impl.cuh"

namespace fa4::cuda::sm80 {
cudaError_t launch_fwd_d256(const FwdArgs& p, bool bf16, Tile tile, dim3 grid, cudaStream_t stream) {
  return launch_dims<256, 256>(p, bf16, tile, grid, stream);
}
}  // namespace fa4::cuda::sm80
