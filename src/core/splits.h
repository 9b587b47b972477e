// The split-KV heuristic, one rule for every backend (cpu threads and cuda CTAs alike).
//
// A backend describes its unsplit problem as `units` independent work items (cuda: CTAs of the
// unsplit grid; cpu: (batch, kv head, query tile) items) of which `slots` run at once (cuda:
// resident CTAs over all SMs; cpu: threads). Splitting the key range of every item into s parts
// gives units * s items, run in waves of `slots`; the last wave of a badly chosen count is
// mostly empty. The rule is FlashAttention-2's wave-efficiency heuristic: pick the smallest
// split count whose wave efficiency (waves / ceil(waves)) is within 85% of the best count's.
#pragma once

#include <cstdint>

namespace fa4::core {

struct SplitWork {
  int64_t units = 0;       // work items of the unsplit problem
  int64_t slots = 0;       // items that run at once
  int64_t max_splits = 0;  // most splits the longest key range allows: each split must keep enough
                           // keys to pay for its partial (O, lse) write and the combine
  int32_t requested = 0;   // AttentionParams::num_splits: 0 = heuristic, n > 0 = exactly n
  // > 0: the key range is split in whole tiles of this many (a split runs ceil(tiles / s) of
  // them, the last splits fewer or none), and the heuristic counts in tiles where one wave holds
  // the split problem (tile_granular_splits).
  int64_t tiles = 0;
};

// Among the counts s in [2, max_splits] whose items fit one wave (units * s <= slots), the one
// with the fewest tiles per split, ceil(tiles / s), and of those the smallest; 0 where no count
// of two or more fits one wave. (Waves alone picked 7 splits for 16 tiles -- 3 tiles for most
// splits, none for the last -- where 8 splits run 2 each.)
int64_t tile_granular_splits(const SplitWork& w);

// The split count, in [1, 128] for the heuristic (or `requested` when that is > 0).
int choose_num_splits(const SplitWork& w);

}  // namespace fa4::core
