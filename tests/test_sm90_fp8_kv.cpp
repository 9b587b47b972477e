// The widening map of the sm90 kernel's fp8-KV tile (src/cuda/sm90/fwd_fp8_kv.h ConvertMap, the
// index arithmetic of fwd_fp8_kv.cuh KvConverter::slot) on the CPU, for both converter counts
// (96: producer warps 1-3; 224: with consumer warpgroup 1, FA4_SM90_FP8_KV_WIDE_CONVERT): the
// converter threads' units cover every 16-byte piece of an e4m3 byte slot exactly once, read it
// where the 128-byte-swizzled TMA box put it, and write its 16 values where a 16-bit TMA box of
// the same rows would have put them -- checked by emulating the converters on slot images -- with
// no shared-memory bank conflict in any quarter-warp phase of the loads or the stores.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "cuda/common/e4m3.h"
#include "cuda/sm90/fwd_fp8_kv.h"

namespace {

using fa4::cuda::sm90::ConvertMap;
using fa4::cuda::sm90::kConvertThreads;
using fa4::cuda::sm90::kWideConvertThreads;

// TMA's 128-byte swizzle of a [rows][128-byte] chunk on a 1024-byte boundary: piece p of row r at
// 128 r + 16 (p ^ (r % 8)).
uint32_t swizzled(int row, int piece) { return static_cast<uint32_t>(row * 128 + ((piece ^ (row % 8)) << 4)); }

template <int kBlockN, int kD, int kThreads>
void check_map() {
  SCOPED_TRACE(::testing::Message() << kBlockN << " x " << kD << ", " << kThreads << " converter threads");
  using M = ConvertMap<kBlockN, kD, kThreads>;
  constexpr uint32_t kByteChunk = kBlockN * 128, kChunk16 = kBlockN * 128;
  // A byte slot as the TMA writes it (row r, column c of the tile: chunk c / 128) and the 16-bit
  // slot the converters fill (bf16 bits of the values; chunk c / 64).
  std::mt19937 rng(7);
  std::vector<uint8_t> tile(static_cast<size_t>(kBlockN) * kD);
  for (auto& b : tile) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> bytes(static_cast<size_t>(kBlockN) * kD);
  for (int r = 0; r < kBlockN; ++r)
    for (int c = 0; c < kD; ++c)
      bytes[(c / 128) * kByteChunk + swizzled(r, (c % 128) / 16) + c % 16] = tile[static_cast<size_t>(r) * kD + c];
  std::vector<uint16_t> out(static_cast<size_t>(kBlockN) * kD, 0xdead);
  std::set<std::pair<int, int>> seen;
  for (int ct = 0; ct < kThreads; ++ct) {
    const uint32_t rl = static_cast<uint32_t>(ct) % 8u, g0 = static_cast<uint32_t>(ct) / 8u;
    for (int i = 0; i < M::kSteps; ++i) {
      const uint32_t g = g0 + static_cast<uint32_t>(i) * M::kGroupStep;
      if (g >= M::kGroups) {
        EXPECT_EQ(i, M::kSteps - 1) << "only the last step is partial";
        continue;
      }
      const int u = static_cast<int>(g * 8 + rl);
      const int r = M::row(u), p = M::piece(u);
      EXPECT_EQ(static_cast<int>(M::row_of(g, rl)), r);  // (the converters' sequence-end test)
      EXPECT_TRUE(seen.insert({r, p}).second) << "unit (" << r << ", " << p << ") twice";
      EXPECT_EQ(M::src(g, rl), (p / 8) * kByteChunk + swizzled(r, p % 8));
      for (int h = 0; h < 2; ++h) {
        const int c0 = 16 * p + 8 * h;  // first column of the half
        EXPECT_EQ(M::dst(g, rl, h), (c0 / 64) * kChunk16 + swizzled(r, (c0 % 64) / 8));
        for (int e = 0; e < 8; ++e) {
          const float v = fa4::cuda::e4m3_to_f32(bytes[M::src(g, rl) + 8 * h + e]);
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          out[(M::dst(g, rl, h) + 2 * e) / 2] = static_cast<uint16_t>(bits >> 16);  // bf16: exact
        }
      }
    }
  }
  EXPECT_EQ(static_cast<int>(seen.size()), M::kUnits);
  // Read back through the 16-bit swizzle: every element is its tile byte's value.
  int bad = 0;
  for (int r = 0; r < kBlockN; ++r)
    for (int c = 0; c < kD; ++c) {
      const uint32_t at = (c / 64) * kChunk16 + swizzled(r, (c % 64) / 8) + 2 * (c % 8);
      const float v = fa4::cuda::e4m3_to_f32(tile[static_cast<size_t>(r) * kD + c]);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (out[at / 2] != static_cast<uint16_t>(bits >> 16) && ++bad <= 5) ADD_FAILURE() << "row " << r << " col " << c;
    }
  EXPECT_EQ(bad, 0);
  // Bank conflicts: the 8 lanes of each quarter warp (one phase of a 16-byte access) hit 8
  // different 16-byte bank groups, on the load and on each store (lanes past the slot idle).
  // (Converter warps are 32 consecutive ct from a multiple of 32: consumer warpgroup 1's from 96.)
  for (int w = 0; w < kThreads / 32; ++w)
    for (int q = 0; q < 4; ++q)
      for (int i = 0; i < M::kSteps; ++i) {
        std::set<uint32_t> ld, st0, st1;
        int lanes = 0;
        for (int l = 0; l < 8; ++l) {
          const int ct = 32 * w + 8 * q + l;
          const uint32_t rl = static_cast<uint32_t>(ct) % 8u, g = static_cast<uint32_t>(ct) / 8u + i * M::kGroupStep;
          if (g >= M::kGroups) continue;
          ++lanes;
          ld.insert(M::src(g, rl) % 128 / 16), st0.insert(M::dst(g, rl, 0) % 128 / 16), st1.insert(M::dst(g, rl, 1) % 128 / 16);
        }
        EXPECT_EQ(static_cast<int>(ld.size()), lanes);
        EXPECT_EQ(static_cast<int>(st0.size()), lanes);
        EXPECT_EQ(static_cast<int>(st1.size()), lanes);
      }
}

// The lean converter's offsets (ConvertMap::lean_*, KvConverter::slot_lean, FA4_SM90_FP8_KV_LEAN):
// a per-thread base plus a step term equal the map's own src / dst / row_of at every step, the
// hi flag is one value per warp (its template parameter), every step before the last is inside
// the slot, and the row groups repeat in even / odd pairs (the batch loop's pointer advance).
template <int kBlockN, int kThreads>
void check_lean() {
  SCOPED_TRACE(::testing::Message() << kBlockN << " x 128, " << kThreads << " converter threads");
  using M = ConvertMap<kBlockN, 128, kThreads>;
  static_assert(M::kLeanMap);
  constexpr int kPairRg = static_cast<int>(M::kGroupStep) / 4;
  for (uint32_t ct = 0; ct < kThreads; ++ct) {
    const uint32_t rl = ct % 8, g0 = ct / 8;
    const bool hi = M::lean_hi(ct);
    EXPECT_EQ(hi, M::lean_hi(ct / 32 * 32)) << "hi differs inside warp " << ct / 32;
    for (int i = 0; i < M::kSteps; ++i) {
      const uint32_t g = g0 + static_cast<uint32_t>(i) * M::kGroupStep;
      if (i < M::kSteps - 1) {
        EXPECT_LT(g, M::kGroups) << "ct " << ct << " step " << i;
      }
      if (g >= M::kGroups) continue;
      const int rg = M::lean_rg(hi, i);
      EXPECT_EQ(rg, (i / 2) * kPairRg + (i % 2 ? M::lean_rg(hi, 1) : 0)) << "ct " << ct << " step " << i;
      EXPECT_EQ(M::src(g, rl), M::lean_src(ct, i % 2) + 1024u * rg) << "ct " << ct << " step " << i;
      for (uint32_t h = 0; h < 2; ++h)
        EXPECT_EQ(static_cast<int64_t>(M::dst(g, rl, h)),
                  static_cast<int64_t>(M::lean_dst(ct, h)) + (i % 2 ? M::lean_odd_chunk(hi) : 0) + 1024 * rg)
            << "ct " << ct << " step " << i << " half " << h;
      EXPECT_EQ(M::row_of(g, rl), M::lean_row(ct) + 8u * rg) << "ct " << ct << " step " << i;
    }
  }
}

TEST(Sm90Fp8Kv, LeanOffsetsAreTheMap) {
  check_lean<128, kConvertThreads>();
  check_lean<128, kWideConvertThreads>();
  check_lean<64, kConvertThreads>();
  check_lean<64, kWideConvertThreads>();
}

TEST(Sm90Fp8Kv, ConvertMapD128) {
  check_map<128, 128, kConvertThreads>();
  check_map<128, 128, kWideConvertThreads>();
}
TEST(Sm90Fp8Kv, ConvertMapOtherShapes) {  // (shapes an instance may take later)
  check_map<64, 128, kConvertThreads>();
  check_map<128, 256, kConvertThreads>();
  check_map<64, 128, kWideConvertThreads>();
  check_map<128, 256, kWideConvertThreads>();
}

// The converter count a launch's barriers expect (fwd_fp8_kv.cuh init_fp8_kv_rings) and its map's
// thread count: the wide one only in solo launches with the switch on.
TEST(Sm90Fp8Kv, ConverterCount) {
  using fa4::cuda::sm90::fp8_kv_convert_threads;
  static_assert(kConvertThreads == 96 && kWideConvertThreads == 96 + 128);
  EXPECT_EQ(fp8_kv_convert_threads(false), kConvertThreads);
  EXPECT_EQ(fp8_kv_convert_threads(true), FA4_SM90_FP8_KV_WIDE_CONVERT ? kWideConvertThreads : kConvertThreads);
}

TEST(Sm90Fp8Kv, PagesThatFitTheBoxes) {
  using fa4::cuda::sm90::fp8_kv_pages_fit;
  for (int64_t p : {128, 256, 1024}) EXPECT_TRUE(fp8_kv_pages_fit(p, 128)) << p;
  for (int64_t p : {8, 16, 32, 64}) EXPECT_EQ(fp8_kv_pages_fit(p, 128), FA4_SM90_PAGED_SUB != 0) << p;
  for (int64_t p : {1, 3, 4, 24, 48, 96, 192}) EXPECT_FALSE(fp8_kv_pages_fit(p, 128)) << p;
}

}  // namespace
