// sm90 forward kernel instances for 16-bit q (fp16 and bf16) against an e4m3 K / V cache,
// Dqk = Dv = 128 (Tile::fp8_kv: the cache's bytes widened into the 16-bit rings, fwd_fp8_kv.h).
// (FA4_SM90_FP8_KV_F16_COMPUTE: the fp16 instance only; bf16 q is fwd_d128_fp8_kv_f16.cu's.)
#include "cuda/sm90/fwd_launch_impl.cuh"

namespace fa4::cuda::sm90 {
cudaError_t launch_fwd_d128_fp8_kv(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream) {
#if FA4_SM90_FP8_KV_F16_COMPUTE
  // bf16 q runs fwd_d128_fp8_kv_f16.cu's instance (fwd_launch.cpp): this file has the fp16 one only.
  if (bf16) return cudaErrorInvalidValue;
  return launch_instance<__half, 128, 128, Tile::fp8_kv>(P, grid, stream);
#else
  return launch_dims<128, 128, Tile::fp8_kv>(P, bf16, grid, stream);
#endif
}
}  // namespace fa4::cuda::sm90
