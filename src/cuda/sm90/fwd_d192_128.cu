// sm90 forward kernel instances for (Dqk, Dv) = (192, 128) (fp16 and bf16).
#include "cuda/sm90/fwd_launch_impl.cuh"

namespace fa4::cuda::sm90 {
cudaError_t launch_fwd_d192_128(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream) {
  return launch_dims<192, 128>(P, bf16, grid, stream);
}
}  // namespace fa4::cuda::sm90
