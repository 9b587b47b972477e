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

}  // namespace fa4::cuda::sm90

#undef FA4_FP8_LAYOUT_FN
