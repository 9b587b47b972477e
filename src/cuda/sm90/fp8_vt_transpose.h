// The in-kernel V^T transpose of the sm90 fp8 tile (FA4_SM90_FP8_VT_IN_KERNEL, fwd_config.h):
// who moves which bytes of a V byte slot into the V^T slot, host- and device-visible so
// tests/test_sm90_fp8_vt_transpose.cpp checks the whole map on the CPU (the device side is
// fwd_fp8_vt_convert.cuh).
//
// Why: the 8-bit wgmma takes its B operand K-major only, and in O += P V the reduction runs over
// keys, which V has strided. Without this switch a pre-pass kernel writes V^T once per call
// (fwd_fp8_vt.cu: 10-15 % of an S 1k call). With it, the producer's TMA brings V's rows as they
// are into a byte slot ([kBlockN keys][Dv bytes] in Dv-byte swizzle, as a K slot) and the
// producer warpgroup's idle warps 1-3 (the fp8_kv tile's converters) transpose it in shared
// memory into the V^T slot, in exactly the layout the TMA box of the pre-pass's workspace would
// have written (fwd_smem.cuh: [Dv rows][128 key columns], 128-byte swizzle, the columns of each
// 32-key block permuted by fp8_pv_key, fp8_layout.h).
//
// The unit of work (one warp, 512 bytes): 16 keys x 32 value dims, as FA3 moves its V tiles --
//   ldmatrix.x4.trans  four 8 x 8 matrices of 16-bit elements, each 8 keys x 16 dims (two dims per
//                      element): matrix m holds keys 16h + 8 (m & 1) + [0, 8) and dims
//                      32j + 16 (m >> 1) + [0, 16); lane l supplies the row address of key
//                      16h + 8 (m & 1) + (l & 7) for m = l >> 3. Transposed, lane (g, t) = (l >> 2,
//                      l & 3) receives from matrix m the bytes
//                      [V(k + 2t, d + 2g), V(k + 2t, d + 2g + 1), V(k + 2t + 1, d + 2g), V(k + 2t + 1, d + 2g + 1)]
//                      (k, d the matrix's first key and dim);
//   prmt               0x6420 on (matrix 0, matrix 1) gives dim d + 2g at keys 16h + 2t, 16h + 2t + 1,
//                      16h + 8 + 2t, 16h + 8 + 2t + 1 -- which are V^T columns 16h + 4t .. 16h + 4t + 3
//                      of that dim's row, since fp8_pv_key maps column 16H + 4t + b of a 32-key
//                      block to key 16H + 8 (b / 2) + 2t + b % 2: the permutation the P registers
//                      need is the one this instruction pair produces. 0x7531 gives dim d + 2g + 1;
//                      matrices 2, 3 the dims 16 further;
//   stmatrix.x4        lane (g, t)'s register m' goes to row g of matrix m', bytes 4t .. 4t + 3: one
//                      16-byte piece (columns 16h .. 16h + 15) of eight V^T rows per matrix.
// Bank conflicts: the 8 lanes of one matrix address 8 rows of the 128-byte swizzle, whose 16-byte
// piece is XOR'd by row % 8, so 8 distinct rows % 8 are one conflict-free phase. The ldmatrix
// rows are 8 consecutive keys. The natural stmatrix rows, dims d + 2g for g = 0..7, cover only
// the even residues (4 pieces, 2-way conflicts); so lanes with g >= 4 swap their even and odd
// dims (the prmt selector per lane): matrix 0 takes dims d + 0, 2, 4, 6, 9, 11, 13, 15 and matrix
// 1 the others -- 8 residues each.
// Keys past the sequence's last one (rows of the slot >= `rows`) are stored as zeros (P is 0
// there, but 0 x NaN garbage from another sequence's or an unused cache row would reach O).
#pragma once

#include <cstdint>

#include "cuda/sm90/fp8_layout.h"

#if defined(__CUDACC__)
#define FA4_VT_FN __host__ __device__ __forceinline__ constexpr
#else
#define FA4_VT_FN inline constexpr
#endif

namespace fa4::cuda::sm90 {

// The map of one slot of kBlockN keys x kDv dims. The byte slot holds rows of kDv bytes as the
// TMA writes a K slot (fwd_smem.cuh): kDv = 128, 128-byte swizzle (16-byte piece p of row r at
// p ^ (r % 8)); kDv = 64 (the D 64 tile's 64-column chunks), 64-byte swizzle (p ^ ((r / 2) % 4)).
// The V^T slot: kDv rows of 128 key columns, 128-byte swizzle (kBlockN = 128: one V^T chunk,
// fp8_vt_chunk_keys).
template <int kBlockN, int kDv>
struct VtTransposeMap {
  static_assert(kDv == 128 || kDv == 64, "byte-slot rows of one 128- or 64-byte swizzle row per key");
  static_assert(kBlockN == 128, "one V^T chunk of 128 key columns (fp8_vt_chunk_keys)");
  static constexpr int kKeyGroups = kBlockN / 16;  // h: 16 keys each
  static constexpr int kDimGroups = kDv / 32;      // j: 32 dims each
  static constexpr int kKeyGroupBytes = 16 * kDv;  // a key group's rows in the byte slot
  // Who takes what: converter warp w of `warps` takes the key groups h = w, w + warps, ..., each
  // with all its kDimGroups units (j = 0 .. kDimGroups - 1): per key group one base offset on each
  // side, the units' offsets then src_piece's one XOR or immediates (j << 12).

  // A 128-byte-swizzled slot of 128-byte rows (the V^T slot; the byte slot at kDv = 128): byte
  // offset of (row, 16-byte piece).
  static FA4_VT_FN uint32_t swz(int row, int piece) {
    return static_cast<uint32_t>(row * 128 + ((piece ^ (row & 7)) << 4));
  }
  // The byte slot: (key, 16-byte piece) in its swizzle.
  static FA4_VT_FN uint32_t swz_src(int key, int piece) {
    return kDv == 128 ? swz(key, piece) : static_cast<uint32_t>(key * 64 + ((piece ^ ((key >> 1) & 3)) << 4));
  }

  // ldmatrix: the byte-slot offset of the row lane supplies in unit (h, j) -- key 16h + 8 (m & 1) +
  // i, piece 2j + (m >> 1) (m = lane >> 3, i = lane & 7) -- as base + h kKeyGroupBytes + ((j << 5)
  // ^ xr): the key's swizzle term is i (128-byte rows) or i / 2 (64-byte rows: 16h + 8 (m & 1) adds
  // multiples of 4 to key / 2), and 2j + (m >> 1) = 2j ^ (m >> 1) (2j is even), so the piece's XOR
  // term is (j << 5) ^ (((m >> 1) ^ swizzle term) << 4).
  static FA4_VT_FN uint32_t src_base(int lane) { return static_cast<uint32_t>((8 * ((lane >> 3) & 1) + (lane & 7)) * kDv); }
  static FA4_VT_FN uint32_t src_xor(int lane) {
    return static_cast<uint32_t>((((lane >> 4) & 1) ^ (kDv == 128 ? (lane & 7) : (lane & 7) >> 1)) << 4);
  }
  static FA4_VT_FN uint32_t src_piece_x(uint32_t xr, int j) { return (static_cast<uint32_t>(j) << 5) ^ xr; }
  static FA4_VT_FN uint32_t src_piece(int lane, int j) { return src_piece_x(src_xor(lane), j); }
  static FA4_VT_FN uint32_t src_offset(int lane, int h, int j) {
    return src_base(lane) + static_cast<uint32_t>(h * kKeyGroupBytes) + src_piece(lane, j);
  }
  // (The same offset from the definition, for the test: key and piece, swizzled.)
  static FA4_VT_FN uint32_t src_offset_ref(int lane, int h, int j) {
    const int m = lane >> 3, i = lane & 7;
    return swz_src(16 * h + 8 * (m & 1) + i, 2 * j + (m >> 1));
  }

  // stmatrix: the V^T row (value dim) lane supplies in unit (h, j): matrix m' = lane >> 3, row r =
  // lane & 7 holds dim 32j + 16 (m' >> 1) + 2r + ((m' & 1) ^ (r >= 4)).
  static FA4_VT_FN int dst_dim(int lane, int j) {
    const int mp = lane >> 3, r = lane & 7;
    return 32 * j + 16 * (mp >> 1) + 2 * r + ((mp & 1) ^ (r >> 2));
  }
  // Its offset in the V^T slot, piece h of that row: base + (j << 12) + ((h << 4) ^ xd) (the dim's
  // row % 8 does not depend on j: 32j is a multiple of 8).
  static FA4_VT_FN uint32_t dst_base(int lane) { return static_cast<uint32_t>(dst_dim(lane, 0) * 128); }
  static FA4_VT_FN uint32_t dst_xor(int lane) { return static_cast<uint32_t>((dst_dim(lane, 0) & 7) << 4); }
  static FA4_VT_FN uint32_t dst_offset(int lane, int h, int j) {
    return dst_base(lane) + (static_cast<uint32_t>(j) << 12) + ((static_cast<uint32_t>(h) << 4) ^ dst_xor(lane));
  }
  static FA4_VT_FN uint32_t dst_offset_ref(int lane, int h, int j) { return swz(dst_dim(lane, j), h); }

  // prmt selectors of lane: registers 0 / 2 of the stmatrix take the even dim's word (0x6420) for
  // g < 4, the odd dim's (0x7531) for g >= 4; registers 1 / 3 the other.
  static FA4_VT_FN uint32_t sel0(int lane) { return (lane >> 2) < 4 ? 0x6420u : 0x7531u; }
  static FA4_VT_FN uint32_t sel1(int lane) { return (lane >> 2) < 4 ? 0x7531u : 0x6420u; }

  // The keys (within the slot) whose bytes lane's ldmatrix register m holds in unit h: key
  // first_key (bytes 0, 1) and first_key + 1 (bytes 2, 3).
  static FA4_VT_FN int first_key(int lane, int h, int m) { return 16 * h + 8 * (m & 1) + 2 * (lane & 3); }
  // The mask that zeroes a register's keys at or past `rows`.
  static FA4_VT_FN uint32_t key_mask(int key0, int rows) {
    return (key0 < rows ? 0x0000ffffu : 0u) | (key0 + 1 < rows ? 0xffff0000u : 0u);
  }
};

}  // namespace fa4::cuda::sm90

#undef FA4_VT_FN
