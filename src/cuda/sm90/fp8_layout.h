// Register and shared-memory layout facts of the sm90 fp8 (e4m3) prefill path, host- and
// device-visible so tests/test_sm90_fp8_layout.cpp checks them on the CPU.
//
// O += P V with P from registers needs P as the A operand of an 8-bit RS wgmma (m64nNk32), and
// the S = Q K^T accumulator it is computed from has another register layout. Per warp (16 rows
// of the warpgroup's 64), lane l = 4g + t (g = l / 4, t = l % 4), the two layouts are
// (CUTLASS's CLayout_64xN / ALayout_64x32, which the PTX ISA's wgmma fragment figures draw):
//   f32 accumulator, register i (of N / 2):  row g + 8 ((i / 2) % 2), column 8 (i / 4) + 2t + i % 2
//   8-bit A fragment, register r (of 4), byte b (lowest first):
//                                            row g + 8 (r % 2), column k = 16 (r / 2) + 4t + b
// so in one 32-key block a thread holds S columns {8q + 2t, 8q + 2t + 1 : q = 0..3} and the A
// fragment wants columns {4t .. 4t + 3, 16 + 4t .. 16 + 4t + 3}. FA3 shuffles P between lanes
// to match (permute_Aregs_fp8). Here the keys are renamed instead: the V^T pre-pass
// (fwd_fp8_vt.cu) stores V^T's columns of every 32-key block permuted, column kappa <- key
// fp8_pv_key(kappa), so the A operand's column kappa must hold P of key fp8_pv_key(kappa) -- which
// is what the converted accumulator registers hold when packed as fp8_pack_src says: no shuffle,
// each thread converts its own registers (cvt.rn.satfinite.e4m3x2.f32, pairs in register order).
//   fp8_pv_key(kappa) = [0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15,
//                        16, 17, 24, 25, 18, 19, 26, 27, 20, 21, 28, 29, 22, 23, 30, 31]
#pragma once

#include <cstdint>

#include "cuda/sm90/fwd_config.h"

#if defined(__CUDACC__)
#define FA4_FP8_LAYOUT_FN __host__ __device__ __forceinline__ constexpr
#else
#define FA4_FP8_LAYOUT_FN inline constexpr
#endif

namespace fa4::cuda::sm90 {

// Keys per k-step of an 8-bit wgmma (k32) and the block the V^T columns are permuted within.
constexpr int kFp8KeyBlock = 32;

// The key whose value sits in column kappa (0..31) of a 32-key block of V^T, i.e. the key whose P
// the A fragment's column kappa carries: kappa = 16 h + 4 t + b holds key 16 h + 8 (b / 2) + 2 t + b % 2.
FA4_FP8_LAYOUT_FN int fp8_pv_key(int kappa) {
  return (kappa & 16) | ((kappa & 2) << 2) | (((kappa >> 2) & 3) << 1) | (kappa & 1);
}
// Its inverse: the V^T column of key j (0..31) of the block.
FA4_FP8_LAYOUT_FN int fp8_pv_col(int j) {
  return (j & 16) | (((j >> 1) & 3) << 2) | (((j >> 3) & 1) << 1) | (j & 1);
}

// The S accumulator register (index within the thread's 16 registers of one 32-key block) that
// goes into byte b of A-fragment register r: row half r % 2, column pair (b / 2) of the block's
// half r / 2, element b % 2. pack_p (fwd_consumer.cuh) converts exactly these.
FA4_FP8_LAYOUT_FN int fp8_pack_src(int r, int b) { return 8 * (r / 2) + 4 * (b / 2) + 2 * (r % 2) + (b % 2); }

// The layouts above as functions (for the host test): the (row, column) within the warp's 16 rows
// of accumulator register i of lane l, and of A-fragment register r, byte b of lane l.
struct Fp8RowCol {
  int row, col;
};
FA4_FP8_LAYOUT_FN Fp8RowCol wgmma_acc_coord(int lane, int i) {
  return {lane / 4 + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 * (lane % 4) + i % 2};
}
FA4_FP8_LAYOUT_FN Fp8RowCol wgmma_a8_coord(int lane, int r, int b) {
  return {lane / 4 + 8 * (r % 2), 16 * (r / 2) + 4 * (lane % 4) + b};
}

// ---- the V^T workspace of an fp8 call (written by fwd_fp8_vt.cu, read by the kernel's TMA) ----
// e4m3 bytes [bl][hkv][dv][cols]: one row of `cols` key columns per (batch-like index, kv head,
// value dim), keys permuted within each 32-key block (fp8_pv_key). A sequence's columns are
// written from its first key up to a multiple of the call's pad P (fp8_vt_pad of its tile's key
// block: 128, or 384 for the 192-key tile), zeros past its last key, so every column a key tile
// reads is finite (P is 0 there, but 0 x NaN garbage would not be). A row's byte stride `cols` is
// a multiple of 16 (TMA's rule).
//   dense k / cache (bl = batch): sequence b at columns [0, ...) of batch-like index b (cache rows
//     are gathered by cache_batch_idx into b's slot), cols = kv_slot rounded up to P;
//   varlen k (bl = 1): sequence b at column fp8_vt_col0(kv_a, b, P) = round_up(kv_a, 16) + G b
//     (kv_a = cu_seqlens_k[b], G = fp8_vt_seq_gap(P): 144 for P = 128, 400 for 384): 16-byte aligned
//     starts (the pre-pass's vector stores) and, for non-decreasing cu_seqlens_k, disjoint ranges
//     -- sequence b ends before kv_a + sk + 15 + (P - 1) + G b < fp8_vt_col0 of b + 1
//     (>= kv_a + sk + G (b + 1)) --, cols = round_up(Tk + 16 + G B, 16) > every range's end
//     (kv_a + sk <= Tk).
// The pre-pass works in steps of kFp8VtStep keys (a block of rows in shared memory).
constexpr int kFp8VtStep = 128;
// The pad of a tile of `block_n` keys: the least common multiple of the step and the key block.
// (Euclid by hand, not std::lcm: nvcc's device code evaluated std::lcm(128, 128) to 0 -- the
// varlen gap vanished in the kernel's V^T coordinates while the host's layout kept it, and varlen
// fp8 calls read other sequences' columns (H100, 2026-12-06). block_n > 0.)
FA4_FP8_LAYOUT_FN int fp8_vt_pad(int block_n) {
  int a = kFp8VtStep, b = block_n;
  while (b != 0) {
    const int r = a % b;
    a = b, b = r;
  }
  return kFp8VtStep / a * block_n;
}
// The varlen gap of a pad: >= pad - 1 + 15 (the start's rounding), a multiple of 16.
FA4_FP8_LAYOUT_FN int fp8_vt_seq_gap(int pad) { return (pad - 1 + 15 + 15) / 16 * 16; }
// Keys of one V^T chunk of a tile's V^T slot (one TMA box, one K-major swizzle row of the P V
// operand): 128 (128-byte rows and swizzle), 64 (64-byte) for key blocks that are no multiple
// of 128, 32 (32-byte) for those that are no multiple of 64 (160).
FA4_FP8_LAYOUT_FN int fp8_vt_chunk_keys(int block_n) {
  return block_n % 128 == 0 ? 128 : block_n % 64 == 0 ? 64 : 32;
}
FA4_FP8_LAYOUT_FN int64_t fp8_vt_col0(int64_t kv_a, int64_t b, int pad) {
  return (kv_a + 15) / 16 * 16 + b * fp8_vt_seq_gap(pad);
}

struct Fp8VtLayout {
  int64_t cols = 0;   // key columns of a row (bytes; a multiple of 16)
  int32_t pad = 0;    // each sequence's columns written up to a multiple of this (fp8_vt_pad)
  int64_t bl = 0;     // batch-like extent: batch (dense k, cache) or 1 (varlen k)
  int64_t bytes = 0;  // the whole workspace: bl x hkv x dv x cols
};
// The layout of a call on a tile of `block_n` keys (varlen_k: k is packed [Tk, Hkv, D] with
// cu_seqlens_k; kv_slot: keys per sequence slot of dense k / a cache; kv_rows0: k.shape[0], Tk when
// varlen). False when a size does not fit int64 or the kernel's 32-bit TMA coordinates (columns,
// rows x heads < 2^31), or for key blocks that are no multiple of 32 in (0, 256].
inline bool fp8_vt_layout(bool varlen_k, int block_n, int64_t batch, int64_t hkv, int64_t dv, int64_t kv_slot,
                          int64_t kv_rows0, Fp8VtLayout* out) {
  if (batch < 0 || hkv < 0 || dv < 0 || kv_slot < 0 || kv_rows0 < 0 || block_n <= 0 || block_n > 256 ||
      block_n % kFp8KeyBlock != 0)
    return false;
  const int pad = fp8_vt_pad(block_n);
  int64_t cols = 0, bl = 0;
  if (varlen_k) {
    int64_t gaps = 0;
    if (__builtin_mul_overflow(batch, int64_t{fp8_vt_seq_gap(pad)}, &gaps) || __builtin_add_overflow(gaps, kv_rows0, &cols) ||
        __builtin_add_overflow(cols, int64_t{16 + 15}, &cols))
      return false;
    cols = cols / 16 * 16;
    bl = 1;
  } else {
    if (__builtin_add_overflow(kv_slot, int64_t{pad - 1}, &cols)) return false;
    cols = cols / pad * pad;
    bl = batch;
  }
  int64_t rows = 0, bytes = 0;
  if (cols >= (int64_t{1} << 31) || __builtin_mul_overflow(hkv, dv, &rows) || rows >= (int64_t{1} << 31) ||
      __builtin_mul_overflow(rows, bl, &bytes) || __builtin_mul_overflow(bytes, cols, &bytes))
    return false;
  out->cols = cols, out->pad = pad, out->bl = bl, out->bytes = bytes;
  return true;
}

}  // namespace fa4::cuda::sm90

#undef FA4_FP8_LAYOUT_FN
