// sm90 forward kernel instance for bf16 q against an e4m3 K / V cache computed in fp16,
// Dqk = Dv = 128 (FA4_SM90_FP8_KV_F16_COMPUTE, fwd_fp8_kv.h; F16ComputeTraits, fwd_fp8_kv.cuh:
// Q converted to fp16 in shared memory with a power-of-two scale per row, K / V widened to fp16,
// bf16 output). Empty with the switch 0: bf16 q then runs fwd_d128_fp8_kv.cu's bf16 instance.
#include "cuda/sm90/fwd_launch_impl.cuh"

namespace fa4::cuda::sm90 {
#if FA4_SM90_FP8_KV_F16_COMPUTE
cudaError_t launch_fwd_d128_fp8_kv_f16(const Sm90Params& P, dim3 grid, cudaStream_t stream) {
  return launch_traits<F16ComputeTraits<FwdTraits<__half, 128, 128, Tile::fp8_kv>>>(P, grid, stream);
}
#endif
}  // namespace fa4::cuda::sm90
