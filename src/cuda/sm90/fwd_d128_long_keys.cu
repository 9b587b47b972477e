// sm90 forward kernel instances for Dqk = Dv = 128 over long key sequences (Tile::long_keys,
// fwd_config.h FA4_SM90_LONG_KEYS_MIN_SK_D128: the standard tile with P double-buffered), fp16
// and bf16. Compiled only with the switch on.
#include "cuda/sm90/fwd_launch_impl.cuh"

namespace fa4::cuda::sm90 {
cudaError_t launch_fwd_d128_long_keys(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream) {
#if FA4_SM90_LONG_KEYS_MIN_SK_D128 >= 0
  return launch_dims<128, 128, Tile::long_keys>(P, bf16, grid, stream);
#else
  (void)P, (void)bf16, (void)grid, (void)stream;
  return cudaErrorNotSupported;
#endif
}
}  // namespace fa4::cuda::sm90
