// The sm90 kernel's fp8-KV tile (Tile::fp8_kv, FA4_SM90_FP8_KV: fwd_config.h): 16-bit q against an
// e4m3 K / V cache. Host- and device-visible (tests/test_sm90_fp8_kv.cpp checks the map on the
// CPU; fwd_fp8_kv.cuh is the device side).
//
// What differs from the standard 16-bit tile: the producer warp's TMA boxes bring the cache's
// e4m3 rows into byte rings (SharedStorage::kvb, [kBlockN rows][128 bytes] per 128-column chunk,
// 128-byte swizzle, as the all-fp8 tile's K boxes); producer warps 1-3 -- the converters, idle in
// the TMA instances -- walk the same schedule, wait for each byte slot, widen its values exactly to
// the 16-bit element (common/e4m3_widen.cuh) and store them into the 16-bit K / V ring slot in the
// 128-byte-swizzled layout a 16-bit TMA box would have written (fwd_smem.cuh), then publish it
// (fence.proxy.async: generic stores read by wgmma through the async proxy; one arrival per
// converter thread on the slot's full barrier) and release the byte slot. The consumers and the
// epilogue are the 16-bit tile's, with k_descale folded into the score scale and v_descale into O.
//
// Rate: at ~3 TB/s over 132 SMs (~1.75 GHz) an SM takes ~13 cache bytes per clock. The first
// converters (offsets recomputed per unit, bf16 q widened to bf16: ~62 instructions per 16-byte
// unit) held the tile at 1.7 TB/s on an H100; with the offsets derived once per thread
// (KvConverter::units_lean) and bf16 q computed in fp16 (FA4_SM90_FP8_KV_F16_COMPUTE: ~16
// instructions per unit) it reads e4m3 at the bf16 cache's rate (docs/perf/h100-2026-12-06-session.md).
// Measured and not kept (H100 2026-12-06): consumer warpgroup 1, idle at decode, converting too
// (224 converters) -- +40-47 % before the lean offsets; with them -1 to -6 % (fp16 widening) and
// -30 to -40 % (bf16 widening).
#pragma once

#include <cstdint>

#include "cuda/sm90/fwd_config.h"

namespace fa4::cuda::sm90 {

// 1: bf16-q launches of the fp8_kv tile run the fp16 computation (F16ComputeTraits,
// fwd_fp8_kv.cuh; instance fwd_d128_fp8_kv_f16.cu): K / V widened to fp16 (exact, and 3
// instructions per 4 bytes where bf16 takes 9: the converters bound the tile's speed), q
// converted in shared memory to fp16 with a power-of-two scale per row (fp8_kv_q_shift), the
// scores multiplied back, output bf16. H100 2026-12-06, B 32 decode 32/8 D 128, kv 4k-64k,
// contiguous and 64-row pages: bf16 q 1.35-1.52x the bf16 cache's tokens/s with 0, 1.76-1.99x with
// 1 -- as fast as fp16 q: 1. 0 widens K / V to bf16 (an ablation).
#ifndef FA4_SM90_FP8_KV_F16_COMPUTE
#define FA4_SM90_FP8_KV_F16_COMPUTE 1
#endif
constexpr int kConvertWarps = 3;  // producer warps 1-3 (warp 0 issues the TMA loads)
constexpr int kConvertThreads = 32 * kConvertWarps;
// Columns of one e4m3 byte-slot chunk: one 128-byte swizzle row (the tile's D 128 rows whole).
constexpr int kFp8KvByteCols = 128;
// Register split of the fp8_kv instances (fwd_schedule.h): 56 per producer-warpgroup thread, 224
// per consumer thread; 128 x 56 + 256 x 224 = 64512 = the launch's 384 x 168 (setmaxnreg moves
// registers within the CTA's pool). ptxas -v (nvcc 13.0, D 128): with the lean converters
// (KvConverter::units_lean) 36 bytes spilled at 56 / 224, in the converters' walk state, not in the
// unit loop; the per-unit map loop before them spilled 0 (fp16) / 4 bytes (bf16). 40 / 232 spilled
// 150-180 bytes in the converters and warp 0's walk (its TileWork stays live across the first K /
// V loads: O is staged in Q, so Q loads after them).
constexpr int kFp8KvProducerRegs = 56, kFp8KvConsumerRegs = 224;

// Who widens what in one K or V slot of kBlockN keys x kD columns, among kThreads converter
// threads (kConvertThreads in the kernel; the tests check other counts too). A unit is 16 e4m3
// bytes of one row (a 16-byte piece of the byte slot) -> 16 16-bit values (two 16-byte pieces of
// the 16-bit slot); converter thread ct takes units ct, ct + kThreads, ... (kSteps of them, the
// last one partial). Unit u is piece (u / 8) % kPieces of row 8 (u / (8 kPieces)) + u % 8: the 8
// lanes of a quarter warp (one shared-memory phase of a 16-byte access) take one piece of 8
// consecutive rows, which the 128-byte swizzle of both slots (the 16-byte piece q of row r at
// 128 r + 16 (q ^ (r % 8)) of its chunk) spreads over all eight 16-byte bank groups: no bank
// conflict on the load nor on either store. (A warp's threads are 32 consecutive ct from a
// multiple of 32, so its quarter warps are 8-aligned ct.)
template <int kBlockN, int kD, int kThreads>
struct ConvertMap {
  static_assert(kD % kFp8KvByteCols == 0 && kBlockN % 8 == 0, "whole 128-byte rows, 8-row swizzle atoms");
  static_assert(kThreads % 8 == 0, "a thread's units keep its row % 8 (the swizzle XOR)");
  static constexpr int kPieces = kD / 16;  // 16-byte pieces of an e4m3 row
  static constexpr int kUnits = kBlockN * kPieces;
  static constexpr int kSteps = (kUnits + kThreads - 1) / kThreads;
  static constexpr uint32_t kByteChunkBytes = kBlockN * kFp8KvByteCols;  // [kBlockN][128] e4m3
  static constexpr uint32_t kChunkBytes = kBlockN * 128;                // [kBlockN][64] 16-bit
  // Unit u as (g, rl) = (u / 8, u % 8): step i of thread ct is g = ct / 8 + i kThreads / 8,
  // rl = ct % 8 -- every unit of a thread has the same row % 8, so the swizzle XOR is fixed.
  static constexpr uint32_t kGroupStep = kThreads / 8;
  static constexpr uint32_t kGroups = kUnits / 8;
  static constexpr int row(int u) { return 8 * (u / (8 * kPieces)) + u % 8; }
  static constexpr uint32_t row_of(uint32_t g, uint32_t rl) { return 8 * (g / kPieces) + rl; }  // unit (g, rl)'s row
  static constexpr int piece(int u) { return (u / 8) % kPieces; }
  // Byte offset of unit (g, rl) in the byte slot: chunk p / 8, piece p % 8 of row 8 (g / kPieces) + rl.
  static constexpr uint32_t src(uint32_t g, uint32_t rl) {
    const uint32_t p = g % kPieces, r = 8 * (g / kPieces) + rl;
    return (p / 8) * kByteChunkBytes + r * 128 + (((p % 8) ^ rl) << 4);
  }
  // Byte offset in the 16-bit slot of half h (8 values) of unit (g, rl): columns 16 p + 8 h, i.e.
  // 64-column chunk p / 4, 16-byte piece 2 (p % 4) + h of its 128-byte row.
  static constexpr uint32_t dst(uint32_t g, uint32_t rl, uint32_t h) {
    const uint32_t p = g % kPieces, r = 8 * (g / kPieces) + rl;
    return (p / 4) * kChunkBytes + r * 128 + (((2 * (p % 4) + h) ^ rl) << 4);
  }

  // The same offsets as a per-thread base plus a step term (KvConverter::units_lean), where the
  // D 128 map's group step is 4 mod 8: step i of thread ct (g = g0 + i kGroupStep,
  // g0 = ct / 8 = 8 a + p0) has piece p0 ^ 4 on odd steps and row group
  // a + lean_rg(hi, i), hi = p0 >= 4 (the same for a warp's 32 threads: 4 aligned consecutive g0).
  //   src(g, rl)    = lean_src(ct, i % 2) + 1024 lean_rg(hi, i)
  //   dst(g, rl, h) = lean_dst(ct, h) + (i odd ? lean_odd_chunk(hi) : 0) + 1024 lean_rg(hi, i)
  //   row_of(g, rl) = lean_row(ct) + 8 lean_rg(hi, i)
  // and every step before the last is inside the slot (tests/test_sm90_fp8_kv.cpp checks all).
  static constexpr bool kLeanMap = kPieces == 8 && kGroupStep % 8 == 4;
  static constexpr bool lean_hi(uint32_t ct) { return (ct / 8) % 8 >= 4; }
  static constexpr int lean_rg(bool hi, int i) { return (4 * hi + i * static_cast<int>(kGroupStep)) / 8; }
  static constexpr uint32_t lean_row(uint32_t ct) { return 8 * (ct / 64) + ct % 8; }
  static constexpr uint32_t lean_src(uint32_t ct, int odd) {
    return (lean_row(ct) * 128 + ((((ct / 8) % 8) ^ (ct % 8)) << 4)) ^ (odd ? 64u : 0u);
  }
  static constexpr uint32_t lean_dst(uint32_t ct, uint32_t h) {
    const uint32_t p0 = (ct / 8) % 8;
    return (p0 / 4) * kChunkBytes + lean_row(ct) * 128 + (((2 * (p0 % 4) + h) ^ (ct % 8)) << 4);
  }
  static constexpr int lean_odd_chunk(bool hi) {
    return hi ? -static_cast<int>(kChunkBytes) : static_cast<int>(kChunkBytes);
  }
};

// (FA4_SM90_FP8_KV_F16_COMPUTE) The power-of-two shift s of one query row's bf16 values before
// they are rounded to fp16: q'_j = q_j 2^s (in fp32, exact), the row's scores S' = q' . k then
// multiplied by 2^-s (exact in fp32: a power of two) before the softmax. `amax`: the largest
// (bits & 0x7fff) of the row's bf16 values -- magnitudes compare as integers, so its exponent
// field E is the row's largest exponent.
// Numerics: s = 14 - (E - 127) puts the row's largest magnitude in [2^14, 2^15), below fp16's
// 65504 (no overflow, the sum of 128 products stays far inside fp32). fp16 has 11 significant
// bits down to 2^-14 (its smallest normal), bf16 has 8: every value of the row whose scaled
// magnitude is >= 2^-14 -- i.e. >= 2^-28 of the row's max -- converts exactly; smaller ones keep
// fewer bits or flush to 0, an error below 2^-28 x |the row's largest term| per product, far
// under fp32 accumulation noise (2^-24 relative per add) and the bf16 path's own rounding. K / V
// widen exactly (every e4m3 value is an fp16 normal), and P in fp16 has 11 significant bits
// where bf16 P has 8 (absolute error <= 2^-25 below fp16's normals, against the row sum >= 1):
// the result is within the bf16 path's error.
// Edge cases: an all-zero row (amax 0) keeps s = 0; a row holding Inf / NaN (E = 255) keeps
// s = 0, so they reach the scores as in the bf16 path (its finite values above 65504 become Inf
// in fp16: that row's output is NaN / Inf either way). Rows of tiny values (E < 15) clamp to
// s = 126 so that 2^s and 2^-s both stay normal fp32 numbers (under --use_fast_math a subnormal
// factor would flush to 0): their largest scaled value is then >= 2^-7 (bf16 subnormals: E = 0,
// >= 2^-133), still exact with its <= 8 bits -- though on the device, under --use_fast_math, the
// fp32 multiply flushes subnormal inputs (|q| < 2^-126) to 0: scores below 2^-126 |k| D, nothing
// next to the softmax's exponentials of 1. Range: s in [-113 (E = 254), 126].
constexpr int kFp8KvQShiftMax = 126;
constexpr int fp8_kv_q_shift(uint32_t amax) {
  const int e = static_cast<int>((amax >> 7) & 0xffu);
  if (amax == 0 || e == 255) return 0;
  const int s = 14 - (e - 127);
  return s < kFp8KvQShiftMax ? s : kFp8KvQShiftMax;
}
// 2^s as fp32 bits, for |s| <= 126 (both factors of fp8_kv_q_shift's range are normal numbers).
constexpr uint32_t fp8_kv_pow2_bits(int s) { return static_cast<uint32_t>(127 + s) << 23; }

// Page sizes the fp8_kv tile's TMA loads take (cuda/plan.cpp): multiples of the key block, or pages
// that divide it in whole 8-row swizzle atoms (one box per page: fwd_producer.cuh load_pages; an
// e4m3 page of 16 rows is a 2 KB box). The 16-bit tiles' FA4_SM90_SUB_PAGE_MIN (64: 16-row 4 KB
// boxes lost to sm80 at B 1, kv 128k) is not applied here: the sm80 fallback of an fp8 cache is the
// slower one (1.0-1.1 TB/s at B 32). Not measured yet.
constexpr bool fp8_kv_pages_fit(int64_t page_size, int block_n) {
  if (page_size % block_n == 0) return true;
  return FA4_SM90_PAGED_SUB && page_size < block_n && block_n % page_size == 0 && page_size % 8 == 0;
}

}  // namespace fa4::cuda::sm90
