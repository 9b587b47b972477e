// The split-KV heuristic shared by the cpu and cuda backends (src/core/splits.h).
#include "core/splits.h"

#include <algorithm>
#include <cmath>

#include "test_util.h"

namespace fa4test {
namespace {

using fa4::core::choose_num_splits;
using fa4::core::SplitWork;

// Wave efficiency of s splits: the fraction of the slots busy, averaged over the waves.
double efficiency(const SplitWork& w, int s) {
  const double waves = static_cast<double>(w.units) * s / static_cast<double>(w.slots);
  return waves / std::ceil(waves);
}

TEST(Splits, ForcedCountIsKeptWhateverTheShape) {
  EXPECT_EQ(choose_num_splits({.units = 1000, .slots = 10, .max_splits = 0, .requested = 7}), 7);
  EXPECT_EQ(choose_num_splits({.units = 0, .slots = 0, .max_splits = 0, .requested = 1}), 1);
  EXPECT_EQ(choose_num_splits({.units = 1, .slots = 264, .max_splits = 1000, .requested = 300}), 300);
}

TEST(Splits, NoSplitWhenTheSlotsAreFullOrTheKeysTooFew) {
  // 80% of the slots busy: left whole (211.2 of 264 is the boundary).
  EXPECT_EQ(choose_num_splits({.units = 212, .slots = 264, .max_splits = 100}), 1);
  EXPECT_EQ(choose_num_splits({.units = 5000, .slots = 264, .max_splits = 100}), 1);
  // Fewer than two splits' worth of keys, or nothing to do.
  EXPECT_EQ(choose_num_splits({.units = 1, .slots = 264, .max_splits = 1}), 1);
  EXPECT_EQ(choose_num_splits({.units = 0, .slots = 264, .max_splits = 100}), 1);
  // One thread: nothing runs beside the single unit.
  EXPECT_EQ(choose_num_splits({.units = 1, .slots = 1, .max_splits = 100}), 1);
}

TEST(Splits, KnownCounts) {
  // cpu decode, one kv head, 2 threads: both threads get half of the keys.
  EXPECT_EQ(choose_num_splits({.units = 1, .slots = 2, .max_splits = 32}), 2);
  // H200 decode tile (132 SMs x 2 CTAs): 16 CTAs. 15 splits fill 240 / 264 = 91% of one wave,
  // the first count within 85% of the best (33 splits: exactly two full waves).
  EXPECT_EQ(choose_num_splits({.units = 16, .slots = 264, .max_splits = 100}), 15);
  // ... and the length bound wins over the wave rule.
  EXPECT_EQ(choose_num_splits({.units = 16, .slots = 264, .max_splits = 6}), 6);
  // 3 units on 16 threads: 5 splits use 15 / 16 of the threads; 6 would need a second wave.
  EXPECT_EQ(choose_num_splits({.units = 3, .slots = 16, .max_splits = 100}), 5);
}

// The rule itself over random shapes: the chosen count is the smallest whose wave efficiency is
// within 85% of the best count's in [1, min(128, max_splits, 2 * slots / units + 1)].
TEST(Splits, SmallestCountWithin85PercentOfTheBestWave) {
  const uint64_t seed = derive_seed(95003);
  FA4_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int t = 0; t < 20000; ++t) {
    SplitWork w;
    w.slots = 1 + static_cast<int64_t>(rng() % 1200);
    w.units = 1 + static_cast<int64_t>(rng() % (w.slots + 2));
    w.max_splits = static_cast<int64_t>(rng() % 300);
    const int n = choose_num_splits(w);
    SCOPED_TRACE(::testing::Message() << "units " << w.units << " slots " << w.slots << " max_splits " << w.max_splits);
    ASSERT_GE(n, 1);
    ASSERT_LE(n, 128);
    if (10 * w.units >= 8 * w.slots || w.max_splits < 2) {
      ASSERT_EQ(n, 1);
      continue;
    }
    const int64_t top = std::min<int64_t>({128, w.max_splits, (2 * w.slots + w.units - 1) / w.units + 1});
    ASSERT_LE(n, top);
    double best = 0;
    for (int s = 1; s <= top; ++s) best = std::max(best, efficiency(w, s));
    ASSERT_GE(efficiency(w, n), 0.85 * best);
    for (int s = 1; s < n; ++s) ASSERT_LT(efficiency(w, s), 0.85 * best) << "s = " << s;
  }
}

}  // namespace
// Tile-granular counts (SplitWork::tiles, the sm90 decode planner's FA4_SM90_TILE_SPLITS): the
// H100 / H200 (132 SMs, one CTA each), B 1 x 8 kv heads, 128-key tiles, >= 2 tiles per split.
TEST(Splits, TileGranularKnownCounts) {
  using fa4::core::tile_granular_splits;
  // kv 2k, 16 tiles: 8 splits of 2 (the waves rule: 7 splits of 3, 3, 3, 3, 3, 1, 0 tiles).
  EXPECT_EQ(choose_num_splits({.units = 8, .slots = 132, .max_splits = 8}), 7);
  EXPECT_EQ(choose_num_splits({.units = 8, .slots = 132, .max_splits = 8, .tiles = 16}), 8);
  // kv 8k, 64 tiles: one wave holds 16 splits of 4 (waves: 14 splits of 5).
  EXPECT_EQ(choose_num_splits({.units = 8, .slots = 132, .max_splits = 32}), 14);
  EXPECT_EQ(choose_num_splits({.units = 8, .slots = 132, .max_splits = 32, .tiles = 64}), 16);
  // 17 tiles, at most 8 splits: 3 tiles per split at the fewest, which 6 splits already give.
  EXPECT_EQ(tile_granular_splits({.units = 8, .slots = 132, .max_splits = 8, .tiles = 17}), 6);
  // No two splits fit one wave (B 16 x 8 heads on 132 SMs): the waves rule decides.
  EXPECT_EQ(tile_granular_splits({.units = 128, .slots = 132, .max_splits = 32, .tiles = 64}), 0);
  EXPECT_EQ(choose_num_splits({.units = 128, .slots = 132, .max_splits = 32, .tiles = 64}), 1);
  EXPECT_EQ(choose_num_splits({.units = 40, .slots = 132, .max_splits = 32, .tiles = 64}),
            choose_num_splits({.units = 40, .slots = 132, .max_splits = 32}));
}

// The tile rule over random shapes: within one wave, no count in [2, max] runs fewer tiles per
// split, and none smaller runs as few.
TEST(Splits, TileGranularFewestTilesPerSplitThenFewestSplits) {
  const uint64_t seed = derive_seed(95004);
  FA4_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int t = 0; t < 20000; ++t) {
    SplitWork w;
    w.slots = 1 + static_cast<int64_t>(rng() % 300);
    w.units = 1 + static_cast<int64_t>(rng() % w.slots);
    w.tiles = 1 + static_cast<int64_t>(rng() % 600);
    w.max_splits = static_cast<int64_t>(rng() % 200);
    SCOPED_TRACE(::testing::Message() << "units " << w.units << " slots " << w.slots << " max_splits " << w.max_splits
                                      << " tiles " << w.tiles);
    const int64_t s = fa4::core::tile_granular_splits(w);
    const int64_t hi = std::min<int64_t>({128, w.max_splits, w.slots / w.units});
    if (hi < 2) {
      ASSERT_EQ(s, 0);
      continue;
    }
    ASSERT_GE(s, 1);
    ASSERT_LE(s, hi);
    auto per = [&](int64_t n) { return (w.tiles + n - 1) / n; };
    for (int64_t n = 1; n <= hi; ++n) {
      ASSERT_GE(per(n), per(s)) << n;
      if (n < s) {
        ASSERT_GT(per(n), per(s)) << n;
      }
    }
  }
}

}  // namespace fa4test
