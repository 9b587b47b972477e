// Host side of the keys-on-M fp8-KV decode kernel (decode_kv.cuh; FA4_SM90_DECODE_KEYS_M): which
// fp8_kv-tile launches it takes, and its launch. It reads the fp8_kv tile's parameters as they
// are (make_params_fp8_kv: 128-byte e4m3 rows in boxes of 128 keys) and writes out / lse, or the
// split partials the combine kernel merges.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/fwd_args.h"
#include "cuda/sm90/fwd_params.h"

// FA4_SM90_DECODE_KEYS_M  1: fp8_kv launches of <= 8 packed query rows per (sequence, kv head) run
//                         the keys-on-M decode kernel. 0 until it has run on a GPU.
#ifndef FA4_SM90_DECODE_KEYS_M
#define FA4_SM90_DECODE_KEYS_M 0
#endif

namespace fa4::cuda::sm90 {

constexpr int kDecodeKeysMRows = 8;  // packed rows (query tokens x the GQA group) per CTA
constexpr int kDecodeKeysMBlockN = 128;

// Whether the kernel computes this fp8_kv launch (D 128, dense q of sq x group <= 8 rows, no
// softcap, pages of whole 128-key tiles, the tile's 128-key boxes).
inline bool decode_kv_takes(const FwdArgs& a, int block_n) {
  return FA4_SM90_DECODE_KEYS_M && block_n == kDecodeKeysMBlockN && a.dqk <= 128 && a.dv <= 128 && !a.varlen_q &&
         a.sq_dense >= 1 && a.sq_dense * a.group <= kDecodeKeysMRows && a.softcap_log2 == 0.f &&
         (a.kv_mode != kKvPaged || a.page_size % kDecodeKeysMBlockN == 0) && a.batch <= 0x7fffffff && a.hkv <= 65535 &&
         a.num_splits <= 65535;
}

cudaError_t launch_decode_kv(const Sm90Params& P, bool bf16, cudaStream_t stream);

}  // namespace fa4::cuda::sm90
