// The copy mapping of the sm90 kernel's gather loads (src/cuda/sm90/fwd_gather.h GatherMap, the
// index arithmetic of fwd_gather.cuh KvGather::load) on the CPU: every 16-byte piece of a slot is
// written exactly once, where a 128-byte-swizzled TMA box puts it, from the row the page table
// names -- checked by emulating the 128 producer threads' copies of paged caches into a slot image.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "cuda/sm90/fwd_gather.h"

namespace {

using fa4::cuda::sm90::GatherMap;
using fa4::cuda::sm90::gather_row_elems;

// TMA's 128-byte swizzle (CU_TENSOR_MAP_SWIZZLE_128B) of a [rows][128-byte] chunk starting on a
// 1024-byte boundary: the 16-byte piece p of row r lands at 128 r + 16 (p ^ (r % 8)).
uint32_t swizzled(int row, int piece) { return static_cast<uint32_t>(row * 128 + ((piece ^ (row % 8)) << 4)); }

template <int kBlockN>
void check_map() {
  using M = GatherMap<kBlockN>;
  std::set<std::pair<int, int>> written;
  for (int warp = 0; warp < 4; ++warp)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < M::kSteps; ++i) {
        const int row = M::copy_row(warp, lane, i), src = M::src_lane(lane, i);
        ASSERT_GE(src, 0);
        ASSERT_LT(src, 32);
        // the lane the row's offset is shuffled from (same warp) read that row's page-table entry
        EXPECT_EQ(M::entry_row(warp, src), row) << warp << " " << lane << " " << i;
        EXPECT_EQ(M::dst(M::dst0(warp, lane), i), swizzled(row, lane % 8)) << warp << " " << lane << " " << i;
        // on the absolute address of a 1024-byte aligned slot the XOR is the same
        const uint32_t slot = 7 * 1024;
        EXPECT_EQ(M::dst(slot + M::dst0(warp, lane), i), slot + swizzled(row, lane % 8));
        EXPECT_TRUE(written.insert({row, lane % 8}).second) << "piece written twice: " << row << " " << lane % 8;
      }
  EXPECT_EQ(written.size(), static_cast<size_t>(kBlockN * 8)) << "every piece of every row once";
  // one warp instruction's 32 pieces are 4 whole rows: 512 contiguous bytes (no bank conflicts
  // beyond the 4 wavefronts of 512 bytes)
  for (int warp = 0; warp < 4; ++warp)
    for (int i = 0; i < M::kSteps; ++i) {
      std::set<uint32_t> offs;
      for (int lane = 0; lane < 32; ++lane) offs.insert(M::dst(M::dst0(warp, lane), i) / 16);
      EXPECT_EQ(offs.size(), 32u);
      EXPECT_EQ(*offs.rbegin() - *offs.begin(), 31u);
    }
}

TEST(Sm90Gather, MapCoversTheSwizzledSlotOnce) {
  check_map<128>();
  check_map<64>();
}

TEST(Sm90Gather, PageEntriesAreClamped) {
  EXPECT_EQ(gather_row_elems(3, 5, 1000, 10, 8), 3 * 1000 + 5 * 10);
  EXPECT_EQ(gather_row_elems(-1, 5, 1000, 10, 8), 5 * 10);
  EXPECT_EQ(gather_row_elems(8, 0, 1000, 10, 8), 7 * 1000);
  EXPECT_EQ(gather_row_elems(int32_t{1} << 30, 2, int64_t{1} << 20, 64, int64_t{1} << 31),
            (int64_t{1} << 50) + 128);  // 64-bit products
}

// Emulates KvGather::load for one key tile of a paged cache [pages, ps, hkv, D] (16-bit elements,
// element (pg, r, h, c) holding a value that names it) and checks the slot image: row t of the
// tile (key j0 + t) holds the cache row the page table names for it, every column, in the
// swizzled layout; rows at or past sk are zero.
template <int kBlockN>
void emulate(int D, int ps, int pages, int hkv, int hk, int j0, int sk, std::mt19937& rng) {
  using M = GatherMap<kBlockN>;
  const int64_t s1 = int64_t{hkv} * D + 8 * (rng() % 2), s0 = s1 * ps + 16 * (rng() % 3), sh = D;  // padded strides
  std::vector<uint16_t> cache(static_cast<size_t>(s0 * pages + 64), 0xFFFF);
  auto tag = [&](int pg, int r, int h, int c) { return static_cast<uint16_t>((pg * 131 + r * 31 + h * 7 + c) % 65000 + 1); };
  for (int pg = 0; pg < pages; ++pg)
    for (int r = 0; r < ps; ++r)
      for (int h = 0; h < hkv; ++h)
        for (int c = 0; c < D; ++c) cache[static_cast<size_t>(pg * s0 + r * s1 + h * sh + c)] = tag(pg, r, h, c);
  // a scattered table for the sequence (sk keys), garbage (out of range, negative) past it
  const int used = (sk + ps - 1) / ps, entries = used + 3;
  std::vector<int32_t> table(static_cast<size_t>(entries));
  for (int e = 0; e < entries; ++e) table[e] = e < used ? static_cast<int32_t>(rng() % pages) : (e % 2 ? -7 : pages + 5);
  if (used > 1) table[1] = -2, table[used - 1] = pages + 1;  // bad entries of used pages: clamped
  auto page_of = [&](int e) { return table[e] < 0 ? 0 : table[e] >= pages ? pages - 1 : table[e]; };

  const int chunks = D / 64;
  const size_t chunk_bytes = static_cast<size_t>(kBlockN) * 128;
  std::vector<uint8_t> slot(chunk_bytes * chunks, 0xAB);
  for (int warp = 0; warp < 4; ++warp) {
    int64_t off[32];  // each lane's row: page-table entry read only below sk
    for (int lane = 0; lane < 32; ++lane) {
      const int j = j0 + M::entry_row(warp, lane);
      int32_t page = 0;
      int rip = 0;
      if (j < sk) page = table[j / ps], rip = j % ps;
      off[lane] = gather_row_elems(page, rip, s0, s1, pages) * 2;
    }
    const int left = sk - j0 - M::copy_row(warp, 0, 0);
    for (int lane = 0; lane < 32; ++lane) {
      const int64_t base = (int64_t{hk} * sh + (lane % 8) * 8) * 2;
      const uint32_t d0 = M::dst0(warp, lane);
      for (int i = 0; i < M::kSteps; ++i) {
        const int r = M::src_lane(lane, i);
        const int64_t src = base + off[r];
        const bool copy = r < left;
        for (int c = 0; c < chunks; ++c) {
          uint8_t* dst = slot.data() + c * chunk_bytes + M::dst(d0, i);
          if (copy) std::memcpy(dst, reinterpret_cast<const uint8_t*>(cache.data()) + src + c * 128, 16);
          else std::memset(dst, 0, 16);
        }
      }
    }
  }
  for (int t = 0; t < kBlockN; ++t)
    for (int c = 0; c < D; ++c) {
      uint16_t got;
      std::memcpy(&got, slot.data() + (c / 64) * chunk_bytes + swizzled(t, (c % 64) / 8) + (c % 8) * 2, 2);
      const int j = j0 + t;
      const uint16_t want = j < sk ? tag(page_of(j / ps), j % ps, hk, c) : 0;
      ASSERT_EQ(got, want) << "row " << t << " col " << c << " (j0 " << j0 << ", sk " << sk << ", page " << ps << ")";
    }
}

TEST(Sm90Gather, EmulatedLoadsFillTheSlotFromThePageTable) {
  std::mt19937 rng(1234);
  for (int ps : {1, 3, 16, 32, 48, 200})
    for (int D : {64, 128, 256}) {
      const int sk = 700 + static_cast<int>(rng() % 300);
      const int last = (sk - 1) / 128 * 128;
      emulate<128>(D, ps, (sk + ps - 1) / ps + 5, 2, 1, 0, sk, rng);     // a full tile
      emulate<128>(D, ps, (sk + ps - 1) / ps + 5, 2, 1, last, sk, rng);  // the ragged last one
      emulate<64>(D, ps, (sk + ps - 1) / ps + 5, 3, 2, (sk - 1) / 64 * 64, sk, rng);
      emulate<64>(D, ps, (sk + ps - 1) / ps + 5, 1, 0, 64, sk, rng);
    }
}

}  // namespace
