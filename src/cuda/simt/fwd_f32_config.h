// Tile constants and shared-memory layout of the fp32 SIMT kernel (fwd_f32.cu), free of CUDA
// headers so the planner (cuda/plan.cpp, unit-tested in the CPU-only build) sizes the kernel's
// shared memory from the same struct the kernel carves it with.
#pragma once

namespace fa4::cuda::simt {

constexpr int kF32Rows = 8;   // tile rows (query rows, or (row, head) pairs with PackGQA) per CTA: one warp each
constexpr int kF32Keys = 32;  // keys per shared-memory K/V tile: one per lane in the score phase
constexpr int kF32Threads = 32 * kF32Rows;
constexpr int kF32MaxDim = 256;

// Shared-memory layout (bytes from the base; every part 16-byte aligned):
//   sOff [2][kKeys] int64   element offsets of the tile's key rows in k and in v (-1 = no key)
//   sQ   [kRows][dqk4]      the warps' q rows, zero-padded to a multiple of 4 (float4 reads)
//   sK   [kKeys][dqk4 + 1]  odd row stride: lane l reading row l, column d hits bank (l + d) % 32
//   sV   [kKeys][dv32]      zero-padded to whole 32-column groups (no column guard in P V)
// (constexpr: callable in device code under --expt-relaxed-constexpr.)
struct F32Smem {
  static constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }
  int dqk4, kst, dv32;
  int q_off, k_off, v_off, bytes;
  constexpr F32Smem(int dqk, int dv)
      : dqk4(round_up(dqk > 0 ? dqk : 1, 4)),
        kst(dqk4 + 1),
        dv32(round_up(dv > 0 ? dv : 1, 32)),
        q_off(2 * kF32Keys * 8),
        k_off(q_off + kF32Rows * dqk4 * 4),
        v_off(k_off + round_up(kF32Keys * kst * 4, 16)),
        bytes(v_off + kF32Keys * dv32 * 4) {}
};

// Dynamic shared memory of one CTA for head dims (dqk, dv).
constexpr int fwd_f32_smem_bytes(int dqk, int dv) { return F32Smem(dqk, dv).bytes; }

}  // namespace fa4::cuda::simt
