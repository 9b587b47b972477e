// sm90 forward kernel instances for 16-bit q (fp16 and bf16) against an e4m3 K / V cache,
// Dqk = Dv = 128 (Tile::fp8_kv: the cache's bytes widened into the 16-bit rings, fwd_fp8_kv.h).
#include "cuda/sm90/fwd_launch_impl.cuh"

namespace fa4::cuda::sm90 {
cudaError_t launch_fwd_d128_fp8_kv(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream) {
  return launch_dims<128, 128, Tile::fp8_kv>(P, bf16, grid, stream);
}
}  // namespace fa4::cuda::sm90
