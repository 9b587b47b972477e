// Lane fragments of the keys-on-M decode tile (an fp8 KV cache read by mma.sync m16n8k16 in
// fp16; docs/perf/sm90-notes.md, thirty-first session): which bytes of a 128-byte-swizzled e4m3
// K / V slot each lane asks ldmatrix for, and how its registers become the A / B operands of
//   S^T = K Q^T     (M = 16 keys, N = 8 packed query rows, k = 16 dims per step) and
//   O^T += V^T P^T  (M = 16 dims, N = 8 rows, k = 16 keys),
// host- and device-visible so tests/test_sm90_decode_frag.cpp emulates the whole data flow
// (ldmatrix, prmt, cvt, movmatrix, mma) on the CPU against a direct product.
//
// Why keys on M: the fp8_kv tile widens K / V into 16-bit shared-memory rings for wgmma, ~208 KB
// of shared traffic per 128-key tile, which binds it at ~12 e4m3 bytes per SM clock. Here the
// bytes go from shared memory to registers once, are widened there (one cvt per byte pair), and
// feed the tensor cores from registers; decode's N = 8 rows make the tensor work negligible, so
// the old mma.sync is enough, and each warp owns its keys -- no warp waits for another until the
// per-CTA merge.
//
// Fragment semantics (PTX ISA; lane l = 4g + c, g = l / 4, c = l % 4):
//   mma m16n8k16 .row.col, f16 in, f32 out -- A: a0 = (row g, k 2c, 2c+1), a1 = (g + 8, 2c, 2c+1),
//     a2 = (g, 2c+8, 2c+9), a3 = (g + 8, 2c+8, 2c+9); B: b0 = (k 2c, 2c+1; n g), b1 = (k 2c+8,
//     2c+9; n g); C: d0 = (g, 2c), d1 = (g, 2c+1), d2 = (g + 8, 2c), d3 = (g + 8, 2c+1); the lower
//     index in the lower 16 bits.
//   ldmatrix .m8n8 .x4 .b16 -- lane 8m + r gives the address of row r of matrix m (16 bytes);
//     register m of lane l: row g, 16-bit elements 2c, 2c+1 (bytes 4c .. 4c+3). .trans: elements
//     (row 2c, column g) and (row 2c+1, column g).
//   movmatrix .m8n8 .trans .b16 -- a register in the ldmatrix layout of an 8 x 8 matrix becomes
//     the same layout of its transpose.
//   cvt.rn.f16x2.e4m3x2 -- the low byte to the low half (exact: every e4m3 value is an fp16 normal).
//
// S^T: ldmatrix (not transposed) of 8 keys x 16 bytes gives lane (g, c) the bytes 4c .. 4c+3 of
// key g. Read as A's k indices 2c, 2c+1 (low pair) and 2c+8, 2c+9 (high pair), the reduction
// index is permuted inside each 16-dim step: logical k <-> physical dim qk_dim(k). The dot product
// does not care, as long as Q's B registers use the same permutation: b0 / b1 = dims 4c .. 4c+3 of
// query row g, four consecutive 16-bit values (one 8-byte load, once per tile).
// P^T: the S^T accumulators of a 16-key M tile, packed to f16x2 -- (key g; rows 2c, 2c+1) and (key
// g + 8; rows 2c, 2c+1) -- are ldmatrix-layout registers of two 8 x 8 [key][row] matrices, whose
// movmatrix.trans is exactly b0 / b1 of O^T += V^T P^T.
// V^T: ldmatrix.trans of 8 keys x 16 bytes gives lane (g, c) the bytes [V(2c, 2g), V(2c, 2g+1),
// V(2c+1, 2g), V(2c+1, 2g+1)]; prmt 0x3120 puts the key pair of dim 2g in the low half and that of
// dim 2g+1 in the high half, so A's row g is dim 2g and row g + 8 dim 2g + 1 of the 16-dim block
// (pv_dim): O^T's rows come out permuted, and the epilogue writes each lane's (2g, 2g+1) pair.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FA4_DECODE_FRAG_FN __host__ __device__ __forceinline__
#else
#define FA4_DECODE_FRAG_FN inline
#endif

namespace fa4::cuda::sm90::decode {

constexpr int kSlotRowBytes = 128;  // one key's e4m3 row at D 128, one 128-byte swizzle row
constexpr uint32_t kVtPairSelector = 0x3120;  // prmt: bytes (0, 2) low, (1, 3) high

// The physical dim (inside a 16-dim step) of A / B's logical reduction index k of S^T = K Q^T.
constexpr int qk_dim(int k) { return k < 8 ? 4 * (k >> 1) + (k & 1) : 4 * ((k - 8) >> 1) + 2 + (k & 1); }
// The physical dim (inside a 16-dim block) of O^T's M row r.
constexpr int pv_dim(int r) { return r < 8 ? 2 * r : 2 * (r - 8) + 1; }

// Byte offset, in a slot of [keys][128 bytes] with TMA's 128-byte swizzle (the slot 1024-byte
// aligned: 16-byte piece p of row r at p ^ (r % 8)), of the row lane `lane` supplies to an
// ldmatrix.x4 whose matrices are (keys k0 .. k0+7, piece p0), (k0+8 .. k0+15, p0), (k0 .. k0+7,
// p0+1), (k0+8 .. k0+15, p0+1). The same call serves K (steps p0, p0+1 of S^T) and V (.trans: dim
// blocks p0, p0+1 of O^T). Each 8-lane phase reads 8 consecutive rows at one logical piece: 8
// distinct swizzled pieces, conflict-free.
FA4_DECODE_FRAG_FN uint32_t ldsm_row_offset(int lane, int k0, int p0) {
  const int key = k0 + ((lane >> 3) & 1) * 8 + (lane & 7);
  const int piece = p0 + (lane >> 4);
  return static_cast<uint32_t>(key * kSlotRowBytes + ((piece ^ (key & 7)) << 4));
}

// A registers of two S^T k-steps (p0, p0+1) from the four registers of one K ldmatrix.x4 (above).
// cvt: (uint16_t e4m3 pair) -> f16x2, the device's cvt_f16x2_e4m3x2 or an emulation.
template <class Cvt>
FA4_DECODE_FRAG_FN void k_a_regs(const uint32_t (&r)[4], uint32_t (&a)[2][4], Cvt cvt) {
  for (int s = 0; s < 2; ++s) {
    const uint32_t lo = r[2 * s], hi = r[2 * s + 1];  // keys g / g + 8
    a[s][0] = cvt(static_cast<uint16_t>(lo));
    a[s][1] = cvt(static_cast<uint16_t>(hi));
    a[s][2] = cvt(static_cast<uint16_t>(lo >> 16));
    a[s][3] = cvt(static_cast<uint16_t>(hi >> 16));
  }
}

// The first of the four consecutive physical dims whose 16-bit q values make lane c's B registers
// b0 (dims d, d+1) and b1 (d+2, d+3) at S^T step `step` (16 dims each).
FA4_DECODE_FRAG_FN int q_b_dim(int c, int step) { return 16 * step + 4 * c; }

// A registers of two O^T dim blocks (p0, p0+1) from the four registers of one V ldmatrix.x4.trans.
// perm: prmt(x, selector) (the device's __byte_perm(x, 0, s) or an emulation).
template <class Cvt, class Perm>
FA4_DECODE_FRAG_FN void v_a_regs(const uint32_t (&r)[4], uint32_t (&a)[2][4], Cvt cvt, Perm perm) {
  for (int t = 0; t < 2; ++t) {
    const uint32_t lo = perm(r[2 * t], kVtPairSelector);      // keys 2c, 2c+1: dims 2g | 2g+1
    const uint32_t hi = perm(r[2 * t + 1], kVtPairSelector);  // keys 2c+8, 2c+9
    a[t][0] = cvt(static_cast<uint16_t>(lo));
    a[t][1] = cvt(static_cast<uint16_t>(lo >> 16));
    a[t][2] = cvt(static_cast<uint16_t>(hi));
    a[t][3] = cvt(static_cast<uint16_t>(hi >> 16));
  }
}

// The bytes of V ldmatrix.trans register q (matrix q: keys k0 + 8 (q & 1) + [0, 8), above) whose
// keys are < sk: key k0 + 8 (q & 1) + 2c in the low half, the next key in the high half. Rows of
// a slot past the sequence's end hold whatever the cache holds there (another sequence's keys,
// unwritten memory): P is 0 for them, but 0 x NaN is not, so the last tile zeroes their bytes.
FA4_DECODE_FRAG_FN uint32_t v_keep_mask(int c, int q, int k0, int sk) {
  const int k = k0 + 8 * (q & 1) + 2 * c;
  return (k < sk ? 0x0000ffffu : 0u) | (k + 1 < sk ? 0xffff0000u : 0u);
}

// The B registers of O^T += V^T P^T over one 16-key M tile of S^T, from its P values (the
// accumulators d0 .. d3 after the softmax). pack: (float lo, float hi) -> f16x2; trans: movmatrix.
template <class Pack, class Trans>
FA4_DECODE_FRAG_FN void p_b_regs(const float (&p)[4], uint32_t (&b)[2], Pack pack, Trans trans) {
  b[0] = trans(pack(p[0], p[1]));  // keys 2c, 2c+1 of row g <- (key g; rows 2c, 2c+1)
  b[1] = trans(pack(p[2], p[3]));  // keys 2c+8, 2c+9
}

}  // namespace fa4::cuda::sm90::decode
