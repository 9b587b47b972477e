// The keys-on-M fp8-KV decode kernel's instances (decode_kv.cuh): fp16 and bf16 q, D 128. Always
// compiled (CI builds them); the planner (Plan::sm90_decode_keys_m, FA4_SM90_DECODE_KEYS_M) decides
// whether launches come.
#include "cuda/sm90/decode_kv.cuh"
#include "cuda/sm90/fwd_launch.h"

namespace fa4::cuda::sm90 {

cudaError_t launch_decode_kv(const Sm90Params& P, bool bf16, cudaStream_t stream) {
  using namespace decode;
  const dim3 grid(static_cast<unsigned>(P.a.batch), static_cast<unsigned>(P.a.hkv), static_cast<unsigned>(P.a.num_splits));
  const size_t smem = sizeof(DecodeSmem) + 1024;  // (+ the slack to align the struct to 1024 bytes)
  // (one N tile of 8 packed rows where the call has <= 8: half the tensor and register work)
  const bool two = decode_keys_m_tiles(P.a.sq_dense * P.a.group) == 2;
  auto kernel = bf16 ? (two ? decode_kv_kernel<__nv_bfloat16, 2> : decode_kv_kernel<__nv_bfloat16, 1>)
                     : (two ? decode_kv_kernel<__half, 2> : decode_kv_kernel<__half, 1>);
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  kernel<<<grid, kThreads, smem, stream>>>(P);
  return cudaGetLastError();
}

}  // namespace fa4::cuda::sm90
