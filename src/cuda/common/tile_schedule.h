// The persistent tile schedule: which tile of the virtual grid a persistent CTA works on next.
// Host- and device-visible (the planner fills it in; tests/test_tile_schedule.cpp checks it on
// the CPU).
//
// The virtual grid is the one a non-persistent launch would use (x = query tiles of a sequence,
// or all sequences' varlen tiles; y = query head; z = batch x split; cta_tile reads it). A
// persistent launch has ctas <= x * y * z CTAs; in round r CTA b takes linear tile r * ctas + b
// (with `snake`, r * ctas + ctas - 1 - b in odd rounds: on tiles sorted heaviest first that pairs
// a CTA's heavy tiles with light ones), in the order `coords` defines:
//   - (y, z) pairs are taken in sections of `section` pairs; inside a section x is the slowest
//     index, so the CTAs that run at the same time share few heads' K / V (it stays in L2);
//   - section = 1 (non-causal): one head's query tiles back to back, all reading the same K / V;
//   - section > 1 (causal, sized by the planner to fit K / V of the section in L2): x walks the
//     tiles heaviest first (cta_tile reverses x under a causal / windowed mask), so across the
//     section the longest tiles start first and the short ones fill the tail -- longest
//     processing time first, which is what balances the static round-robin.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace fa4::cuda {

struct TileSchedule {
  int64_t gx = 0, gy = 0, gz = 0;  // the virtual grid (each >= 1 when there is work)
  int64_t section = 1;             // (y, z) pairs per section, >= 1
  int32_t snake = 0;               // odd rounds walk the CTAs backwards

  FA4_HD int64_t total() const { return gx * gy * gz; }
  FA4_HD int64_t rounds(int64_t ctas) const { return (total() + ctas - 1) / ctas; }
  // The linear tile of CTA `cta` (of `ctas`) in round r; -1 past the last tile.
  FA4_HD int64_t tile_for(int64_t r, int64_t cta, int64_t ctas) const {
    const int64_t t = r * ctas + ((snake != 0 && (r & 1) != 0) ? ctas - 1 - cta : cta);
    return t < total() ? t : -1;
  }

  // Linear tile t in [0, total()) -> virtual block (x, y, z).
  FA4_HD void coords(int64_t t, int* x, int* y, int* z) const {
    const int64_t pairs = gy * gz;
    const int64_t full = section * gx;           // tiles of one full section
    const int64_t sec = t / full;                // every section before the last is full
    const int64_t first = sec * section;         // first (y, z) pair of the section
    const int64_t here = pairs - first < section ? pairs - first : section;  // pairs in it
    const int64_t r = t - sec * full;
    const int64_t pair = first + r % here;
    *x = static_cast<int>(r / here);
    *y = static_cast<int>(pair % gy);
    *z = static_cast<int>(pair / gy);
  }
};

}  // namespace fa4::cuda

