// sm90 forward kernel instances for Dqk = Dv = 128 walking the balanced shares (Tile::balanced,
// fwd_config.h FA4_SM90_BALANCED: the standard tile with the merge of a cut tile's pieces), fp16
// and bf16. Compiled only with the switch on.
#include "cuda/sm90/fwd_launch_impl.cuh"

namespace fa4::cuda::sm90 {
cudaError_t launch_fwd_d128_balanced(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream) {
#if FA4_SM90_BALANCED
  return launch_dims<128, 128, Tile::balanced>(P, bf16, grid, stream);
#else
  (void)P, (void)bf16, (void)grid, (void)stream;
  return cudaErrorNotSupported;
#endif
}
}  // namespace fa4::cuda::sm90
