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

// Copies both k_new and v_new (one launch). elem_bytes: 2 for fp16/bf16, 4 for fp32.
cudaError_t launch_kv_append(const FwdArgs& p, const AppendArgs& k, const AppendArgs& v, int elem_bytes,
                             cudaStream_t stream);

}  // namespace fa4::cuda
