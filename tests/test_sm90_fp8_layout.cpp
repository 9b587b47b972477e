// The sm90 fp8 path's layout facts (src/cuda/sm90/fp8_layout.h), on the host: the V^T column
// permutation of a 32-key block is a bijection with the stated inverse, and packing the S
// accumulator registers as pack_p does (fp8_pack_src) puts into every byte of the k32 8-bit A
// fragment the P of the key that the permuted V^T column at that k holds, in the same row -- for
// every lane, register and byte. The two register layouts are written out from CUTLASS's
// CLayout_64xN / ALayout_64x32 (the PTX ISA's wgmma fragment figures); the device test
// Sm90Wgmma.Fp8 (tests/cuda/test_sm90_ptx.cu) checks the A layout against the hardware.
#include "cuda/sm90/fp8_layout.h"

#include <gtest/gtest.h>

#include <array>

namespace {

using namespace fa4::cuda::sm90;

// The V^T workspace's padding holds every fp8 tile's key tiles whole (a tile never reads past the
// zeros the pre-pass wrote), a tile's V^T slot is whole chunks of 64 or 128 keys (the TMA boxes),
// the pre-pass's steps divide each pad, and each pad's varlen gap covers it and the start's
// rounding.
TEST(Sm90Fp8Layout, VtPaddingHoldsEveryTilesKeyBlocks) {
  struct T {
    int d;
    Tile t;
  };
  for (const T x : {T{64, Tile::fp8}, T{128, Tile::fp8}, T{256, Tile::fp8}, T{64, Tile::fp8_long_keys}, T{128, Tile::fp8_long_keys}}) {
    SCOPED_TRACE(x.d);
    const int block_n = tile_cfg(x.d, x.d, x.t).block_n;
    const int keys = fp8_vt_chunk_keys(block_n);
    EXPECT_TRUE(keys == 32 || keys == 64 || keys == 128);
    EXPECT_EQ(block_n % keys, 0);
    EXPECT_EQ(block_n % kFp8KeyBlock, 0);
    const int pad = fp8_vt_pad(block_n);
    EXPECT_EQ(pad % block_n, 0);
    EXPECT_EQ(pad % kFp8VtStep, 0);
    EXPECT_GE(fp8_vt_seq_gap(pad), pad - 1 + 15);
    EXPECT_EQ(fp8_vt_seq_gap(pad) % 16, 0);
  }
  EXPECT_EQ(tile_cfg(128, 128, Tile::fp8_long_keys).block_n, FA4_SM90_FP8_LONG_KEYS_BLOCK_N_D128);
  EXPECT_EQ(tile_cfg(64, 64, Tile::fp8_long_keys).block_n, FA4_SM90_FP8_LONG_KEYS_BLOCK_N_D64);
  EXPECT_EQ(fp8_vt_pad(128), 128);
  EXPECT_EQ(fp8_vt_pad(192), 384);
  EXPECT_EQ(fp8_vt_chunk_keys(128), 128);
  EXPECT_EQ(fp8_vt_chunk_keys(192), 64);
  EXPECT_EQ(fp8_vt_chunk_keys(256), 128);
  EXPECT_EQ(fp8_vt_chunk_keys(160), 32);  // (Tile::fp8_long_keys at D 64: 32-byte swizzle chunks)
  EXPECT_EQ(fp8_vt_pad(160), 640);
  EXPECT_EQ(fp8_vt_chunk_keys(224), 32);  // (FA4_SM90_FP8_LONG_KEYS_BLOCK_N_D128=224: FA3's fp8 D 128 tile)
  EXPECT_EQ(fp8_vt_pad(224), 896);
  EXPECT_EQ(fp8_vt_seq_gap(128), 144);
  EXPECT_EQ(fp8_vt_seq_gap(384), 400);
}

TEST(Sm90Fp8Layout, PermutationIsABijectionWithItsInverse) {
  std::array<int, kFp8KeyBlock> seen{};
  for (int kappa = 0; kappa < kFp8KeyBlock; ++kappa) {
    const int j = fp8_pv_key(kappa);
    ASSERT_GE(j, 0);
    ASSERT_LT(j, kFp8KeyBlock);
    ++seen[static_cast<size_t>(j)];
    EXPECT_EQ(fp8_pv_col(j), kappa);
  }
  for (int j = 0; j < kFp8KeyBlock; ++j) EXPECT_EQ(seen[static_cast<size_t>(j)], 1) << "key " << j;
  // The table the design note gives (docs/perf/sm90-notes.md, "fp8 prefill (issue 15 item 1)").
  const int table[kFp8KeyBlock] = {0,  1,  8,  9,  2,  3,  10, 11, 4,  5,  12, 13, 6,  7,  14, 15,
                                   16, 17, 24, 25, 18, 19, 26, 27, 20, 21, 28, 29, 22, 23, 30, 31};
  for (int kappa = 0; kappa < kFp8KeyBlock; ++kappa) EXPECT_EQ(fp8_pv_key(kappa), table[kappa]) << kappa;
  // Each half of the block maps onto itself (a ragged last block's keys stay in its columns' half).
  for (int kappa = 0; kappa < kFp8KeyBlock; ++kappa) EXPECT_EQ(fp8_pv_key(kappa) / 16, kappa / 16);
}

TEST(Sm90Fp8Layout, PackedAccumulatorIsTheAFragmentOfThePermutedKeys) {
  for (int lane = 0; lane < 32; ++lane) {
    std::array<int, 16> used{};  // every accumulator register of the block goes into one byte
    for (int r = 0; r < 4; ++r)
      for (int b = 0; b < 4; ++b) {
        const int src = fp8_pack_src(r, b);
        ASSERT_GE(src, 0);
        ASSERT_LT(src, 16);
        ++used[static_cast<size_t>(src)];
        const Fp8RowCol acc = wgmma_acc_coord(lane, src);  // column = key of the 32-key block
        const Fp8RowCol a = wgmma_a8_coord(lane, r, b);    // column = k of the P V k-step
        EXPECT_EQ(acc.row, a.row) << "lane " << lane << " reg " << r << " byte " << b;
        EXPECT_EQ(acc.col, fp8_pv_key(a.col)) << "lane " << lane << " reg " << r << " byte " << b;
      }
    for (int i = 0; i < 16; ++i) EXPECT_EQ(used[static_cast<size_t>(i)], 1) << "lane " << lane << " register " << i;
  }
  // The accumulator of a whole k-step: 64 rows x 32 columns once each over the warp's lanes
  // (4 warps: rows 16 w + ...), the A fragment likewise -- the layouts are both complete.
  std::array<int, 16 * 32> acc_cells{}, a_cells{};
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 16; ++i) {
      const Fp8RowCol x = wgmma_acc_coord(lane, i);
      ++acc_cells[static_cast<size_t>(x.row * 32 + x.col)];
      const Fp8RowCol y = wgmma_a8_coord(lane, i / 4, i % 4);
      ++a_cells[static_cast<size_t>(y.row * 32 + y.col)];
    }
  for (int c = 0; c < 16 * 32; ++c) {
    EXPECT_EQ(acc_cells[static_cast<size_t>(c)], 1);
    EXPECT_EQ(a_cells[static_cast<size_t>(c)], 1);
  }
}

}  // namespace
