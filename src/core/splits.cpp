#include "core/splits.h"

#include <algorithm>
#include <cmath>

namespace fa4::core {

int choose_num_splits(const SplitWork& w) {
  if (w.requested > 0) return w.requested;
  // A problem that already fills 80% of the slots is left whole: splitting it adds partial
  // writes and a combine pass for at most a 20% gain in occupancy. (10 * units vs 8 * slots:
  // exact, so 1 item on 2 cpu threads is split.)
  if (w.units <= 0 || w.max_splits < 2 || 10 * w.units >= 8 * w.slots) return 1;
  if (w.tiles > 0) {
    const int64_t s = tile_granular_splits(w);
    if (s > 0) return static_cast<int>(s);
  }
  // Counts past 2 * slots / units + 1 only add waves; 128 bounds the partials' workspace.
  const int max_s = static_cast<int>(std::min<int64_t>({128, w.max_splits, (2 * w.slots + w.units - 1) / w.units + 1}));
  double eff[129] = {};
  double best = 0.0;
  for (int s = 1; s <= max_s; ++s) {
    const double waves = static_cast<double>(w.units * s) / static_cast<double>(w.slots);
    eff[s] = waves / std::ceil(waves);
    best = std::max(best, eff[s]);
  }
  for (int s = 1; s <= max_s; ++s)
    if (eff[s] >= 0.85 * best) return s;
  return 1;
}

int64_t tile_granular_splits(const SplitWork& w) {
  if (w.units <= 0 || w.tiles <= 0) return 0;
  const int64_t hi = std::min<int64_t>({128, w.max_splits, w.slots / w.units});
  if (hi < 2) return 0;
  const int64_t per = (w.tiles + hi - 1) / hi;  // the fewest tiles per split (it falls as s grows)
  return (w.tiles + per - 1) / per;             // the smallest count with that many
}

}  // namespace fa4::core
