// Host side of the keys-on-M fp8-KV decode kernel (decode_kv.cuh; FA4_SM90_DECODE_KEYS_M): which
// fp8_kv-tile calls it takes -- the planner decides (Plan::sm90_decode_keys_m), cuda/backend.cpp
// launches it (fwd_launch.h launch_decode_kv) with the fp8_kv tile's maps (make_params_decode_kv:
// 128-byte e4m3 rows in boxes of 128 keys, or of one page) and the factors per (batch, kv head) or
// per token; it writes out / lse, or the split partials the combine kernel merges. Host-only,
// CUDA-free: tests/test_plan.cpp checks the rule.
#pragma once

#include <cstdint>

#include "cuda/sm90/fwd_fp8_kv.h"

// FA4_SM90_DECODE_KEYS_M  1: fp8_kv calls of <= 16 packed query rows per (sequence, kv head) run
//                         the keys-on-M decode kernel. 0 until it has run on a GPU.
#ifndef FA4_SM90_DECODE_KEYS_M
#define FA4_SM90_DECODE_KEYS_M 0
#endif

namespace fa4::cuda::sm90 {

constexpr int kDecodeKeysMRows = 16;  // packed rows (query tokens x the GQA group) per CTA: two mma N tiles
constexpr int kDecodeKeysMBlockN = 128;  // keys per ring slot, the fp8_kv tile's TMA box rows
// The N tiles (8 packed rows each) of a call of `rows` packed rows (sq x group): one where it fits.
constexpr int decode_keys_m_tiles(int64_t rows) { return rows > 8 ? 2 : 1; }
constexpr int kDecodeKeysMCtasPerSm = 2;  // (decode_kv.cuh: __launch_bounds__(160, 2), 99 KB of shared memory)

// Whether the kernel computes an fp8_kv call (given the switch): D 128 (dims <= 128 padded to it),
// dense q with sq x group <= 16 packed rows, any mask / softcap / sinks, the pages the fp8_kv tile's boxes take
// (whole 128-key tiles, or 8-64-row pages dividing one: one box per page), 128-key tiles, a grid
// of (batch, hkv <= 65535, splits <= 65535).
constexpr bool decode_keys_m_fits(bool varlen_q, int64_t sq, int64_t group, bool paged, int64_t page_size,
                                  int dqk, int dv, int block_n, int64_t hkv, int64_t splits) {
  return dqk == 128 && dv == 128 && block_n == kDecodeKeysMBlockN && !varlen_q && sq >= 1 && group >= 1 &&
         sq * group <= kDecodeKeysMRows && (!paged || fp8_kv_pages_fit(page_size, kDecodeKeysMBlockN)) &&
         hkv <= 65535 && splits >= 1 && splits <= 65535;
}

}  // namespace fa4::cuda::sm90
