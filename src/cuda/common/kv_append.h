// KV-cache append on the device: k_new / v_new rows are copied into the (contiguous or paged)
// cache at positions cache_seqlens[b] .. cache_seqlens[b] + Snew - 1, before attention runs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/fwd_args.h"

namespace fa4::cuda {

struct AppendArgs {
  const void* src = nullptr;  // k_new or v_new [B, Snew, Hkv, D]
  int64_t src_s0 = 0, src_s1 = 0, src_sh = 0;
  void* dst = nullptr;  // k or v cache
  int64_t dst_s0 = 0, dst_s1 = 0, dst_sh = 0;
  int32_t d = 0;  // head dim
};

// Copies both k_new and v_new (one launch). elem_bytes: 1 for e4m3, 2 for fp16/bf16, 4 for fp32.
cudaError_t launch_kv_append(const FwdArgs& p, const AppendArgs& k, const AppendArgs& v, int elem_bytes,
                             cudaStream_t stream);

// The factor of an fp8 KV cache row (k_descale or v_descale; FwdArgsFp8's convention): absent
// (1), per (batch, kv head) (tok = 0: b * s0 + h * sh), or per token (tok = 1: the row's slot in
// the cache, a * s0 + row * s1 + h * sh, a = cache row or page).
struct AppendScale {
  const float* data = nullptr;
  int64_t s0 = 0, s1 = 0, sh = 0;
  int32_t tok = 0;
};

// Appends 16-bit k_new / v_new (bf16: else fp16) into an e4m3 cache (one launch): each element
// stored as f32_to_e4m3_sat(x / factor of its row), the fp32 quotient correctly rounded
// (core::quantize_e4m3, the host backends' bytes; common/e4m3.h).
cudaError_t launch_kv_append_fp8(const FwdArgs& p, const AppendArgs& k, const AppendArgs& v, const AppendScale& ks,
                                 const AppendScale& vs, bool bf16, cudaStream_t stream);

}  // namespace fa4::cuda
