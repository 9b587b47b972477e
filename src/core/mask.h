// The attention mask as a small value type, shared by every backend (host and device code).
//
// Positions are 0-based within one sequence and bottom-right aligned: query i sits at key
// position i + off, off = Sk - Sq. Key j is visible to query i iff
//   row_lo(i) <= j < row_hi(i)
// with the interval built from the window (left, right; -1 = unbounded) and the chunk size
// (0 = off; chunked attention is causal inside chunks of C keys, as Llama 4). Causal is
// (left, right) = (-1, 0). Both bounds are non-decreasing in i; the kernels rely on that to
// turn "which keys does this block of rows need" into one interval and to classify tiles in
// O(1).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace fa4::core {

enum class TileKind : int { empty = 0, partial = 1, full = 2 };

struct Mask {
  int64_t left = -1;   // keys to the left of the diagonal, -1 = unbounded
  int64_t right = -1;  // keys to the right of the diagonal, -1 = unbounded; causal = 0
  int64_t chunk = 0;   // chunk size, 0 = no chunking

  FA4_HD bool is_none() const { return left < 0 && right < 0 && chunk == 0; }
};

// The mask of one sequence: the Mask plus that sequence's lengths.
struct SeqMask {
  Mask m;
  int64_t sq = 0, sk = 0;

  FA4_HD int64_t off() const { return sk - sq; }

  // The bounds below are written so that no intermediate overflows for any window or chunk
  // value >= -1 / >= 0 (validation also clamps them to 2^32, see validate.cpp): the window and
  // chunk only ever appear compared with, or subtracted from, a position that exceeds them.

  // First visible key of query row i (may be >= row_hi(i): the row is then empty).
  FA4_HD int64_t row_lo(int64_t i) const {
    const int64_t p = i + off();
    int64_t lo = 0;
    if (m.left >= 0 && p > m.left) lo = p - m.left;  // p - left in (0, p]
    if (m.chunk > 0 && p >= m.chunk) {               // else the chunk starts at or before key 0
      const int64_t c = p - p % m.chunk;             // p > 0: truncation is floor
      if (c > lo) lo = c;
    }
    return lo;
  }
  // One past the last visible key of query row i.
  FA4_HD int64_t row_hi(int64_t i) const {
    const int64_t p = i + off();
    int64_t hi = sk;
    if (m.right >= 0 && m.right < sk - p - 1) hi = p + m.right + 1;  // p + right + 1 < sk: no overflow
    return hi < 0 ? 0 : hi;
  }
  FA4_HD bool visible(int64_t i, int64_t j) const { return j >= row_lo(i) && j < row_hi(i); }

  // Keys any row in [i0, i1) can see: [*lo, *hi); empty when *lo >= *hi. Exact because both
  // bounds are monotone and consecutive rows' intervals overlap or touch.
  FA4_HD void key_range(int64_t i0, int64_t i1, int64_t* lo, int64_t* hi) const {
    *lo = row_lo(i0);
    *hi = row_hi(i1 - 1);
    if (*hi < *lo) *hi = *lo;
  }

  // Tile of rows [i0, i1) x keys [j0, j1): full = every element visible, empty = none,
  // partial = apply visible() per element.
  FA4_HD TileKind classify(int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    int64_t lo, hi;
    key_range(i0, i1, &lo, &hi);
    if (j1 <= lo || j0 >= hi) return TileKind::empty;
    if (row_lo(i1 - 1) <= j0 && row_hi(i0) >= j1) return TileKind::full;
    return TileKind::partial;
  }
};

}  // namespace fa4::core
