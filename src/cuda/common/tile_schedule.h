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
// Two phases (heavy_x > 0, long causal on the sm90 kernel's dynamic walk): the heavy part of
// every sequence -- x < heavy_x, its heaviest query tiles -- first, in sections as above; then the
// light rest (x >= heavy_x) of every pair as one section. The heavy tiles, which reread most of
// their pair's K / V, run a few pairs at a time (the L2 keeps them); the light ones, cheap and
// short, fill the tail from anywhere (H200, 2026-12-02: causal D 128 8k / 16k +4.3 / +2.6 %,
// D 256 4k / 8k +3.1 / +2.3 % over the global snake, docs/perf/sm90-notes.md).
// dynamic != 0: the CTAs do not deal the tiles round-robin; each takes the next unclaimed one
// from a device counter (sm90 fwd_producer.cuh) -- tile_for still gives every CTA's first.
// balanced_n > 0 (the sm90 kernel's FA4_SM90_BALANCED, unmasked problems whose tiles all have
// balanced_n key tiles): whole tiles dealt round-robin leave ceil(total / ctas) - total / ctas of
// a tile idle on the CTAs of the last round: 2048 tiles on 132 SMs (D 128, B S 16k, H 16) run 16
// rounds for 15.5 tiles of work, 3 % of the kernel (bench/sm90_trace.py end_idle, 2026-12-06).
// The balanced walk deals the W = total / ctas whole rounds as tile_for does, then cuts the
// R = total - W ctas remaining tiles' R x balanced_n key tiles into `ctas` equal contiguous
// shares (stream-K over the last round only: its tiles are consecutive, so the K / V in flight
// stay those of a few heads, as in the round-robin -- shares over the whole grid put every head's
// K / V in flight and ran at 0.56-0.89x, H100 2026-12-06). A share is at most one tile's keys,
// so it makes at most two pieces; a tile cut into k pieces is merged by the last to finish.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace fa4::cuda {

struct TileSchedule {
  int64_t gx = 0, gy = 0, gz = 0;  // the virtual grid (each >= 1 when there is work)
  int64_t section = 1;             // (y, z) pairs per section, >= 1
  int32_t snake = 0;               // odd rounds walk the CTAs backwards
  int64_t heavy_x = 0;             // x < heavy_x form the first phase (0: one phase)
  int32_t dynamic = 0;             // tiles claimed from a counter (the sm90 kernel's dynamic walk)
  int64_t balanced_n = 0;          // key tiles per tile of the balanced walk (0: whole tiles)

  FA4_HD int64_t total() const { return gx * gy * gz; }
  FA4_HD int64_t rounds(int64_t ctas) const { return (total() + ctas - 1) / ctas; }
  // The linear tile of CTA `cta` (of `ctas`) in round r; -1 past the last tile.
  FA4_HD int64_t tile_for(int64_t r, int64_t cta, int64_t ctas) const {
    const int64_t t = r * ctas + ((snake != 0 && (r & 1) != 0) ? ctas - 1 - cta : cta);
    return t < total() ? t : -1;
  }

  // The balanced walk (all in 32-bit arithmetic: the planner walks balanced only where the
  // remainder's key tiles x ctas < 2^31; the sm90 producer has 24 registers and 64-bit divisions
  // spilled it). Whole rounds, the remaining tiles' first linear index, their key tiles:
  FA4_HD uint32_t whole_rounds(uint32_t ctas) const { return static_cast<uint32_t>(total()) / ctas; }
  FA4_HD uint32_t remainder_base(uint32_t ctas) const { return whole_rounds(ctas) * ctas; }
  FA4_HD uint32_t remainder_keys(uint32_t ctas) const {
    return (static_cast<uint32_t>(total()) - remainder_base(ctas)) * static_cast<uint32_t>(balanced_n);
  }
  // The first remainder key tile of CTA b's share (b = ctas: the end of the last share).
  FA4_HD uint32_t share_begin(uint32_t b, uint32_t ctas) const {
    const uint32_t u = remainder_keys(ctas), q = u / ctas, rem = u - q * ctas;
    return q * b + rem * b / ctas;  // (rem x b < ctas^2)
  }
  // The CTA whose share holds remainder key tile x (x < remainder_keys): the last b with
  // share_begin(b) <= x (empty shares before it begin there too).
  FA4_HD uint32_t share_of(uint32_t x, uint32_t ctas) const {
    const uint32_t u = remainder_keys(ctas);
    uint32_t b = static_cast<uint32_t>(static_cast<uint64_t>(x) * ctas / u);
    while (b + 1 < ctas && share_begin(b + 1, ctas) <= x) ++b;
    while (b > 0 && share_begin(b, ctas) > x) --b;
    return b;
  }
  // Step r of CTA b: linear tile *t, its key tiles [*lo, *hi) (0 .. balanced_n), and *cut = -1 for
  // a whole tile, else 2 x the remainder tile's index (0 .. R - 1) + which of the CTA's two
  // remainder steps this is -- the piece's state slot is 2 b + *cut % 2. False past the walk.
  FA4_HD bool piece(int64_t r, int64_t b, int64_t ctas, int64_t* t, int* lo, int* hi, int64_t* cut) const {
    const uint32_t uc = static_cast<uint32_t>(ctas), ub = static_cast<uint32_t>(b), n = static_cast<uint32_t>(balanced_n);
    const uint32_t w = whole_rounds(uc);
    if (r < static_cast<int64_t>(w)) {
      *t = static_cast<int64_t>(r) * ctas + b, *lo = 0, *hi = static_cast<int>(n), *cut = -1;
      return true;
    }
    const uint32_t rr = static_cast<uint32_t>(r - w), begin = share_begin(ub, uc), end = share_begin(ub + 1, uc);
    if (rr > 1) return false;
    const uint32_t tile = begin / n + rr, k0 = tile * n;
    if (k0 >= end) return false;
    const uint32_t l = begin > k0 ? begin - k0 : 0, h = end < k0 + n ? end - k0 : n;
    *t = static_cast<int64_t>(remainder_base(uc)) + tile, *lo = static_cast<int>(l), *hi = static_cast<int>(h);
    *cut = l == 0 && h == n ? -1 : static_cast<int64_t>(2 * tile + rr);
    return true;
  }
  // The pieces of remainder tile `tile`: *first = the first CTA whose share cuts it, *count = how
  // many CTAs' shares do (the planner keeps every share non-empty). CTA c = first + i's piece of
  // the tile is its step whole_rounds + (tile - share_begin(c) / balanced_n), slot 2 c + that - W.
  FA4_HD void pieces_of(uint32_t tile, uint32_t ctas, uint32_t* first, uint32_t* count) const {
    const uint32_t n = static_cast<uint32_t>(balanced_n), x0 = tile * n;
    const uint32_t b0 = share_of(x0, ctas), b1 = share_of(x0 + n - 1, ctas);
    *first = b0, *count = b1 - b0 + 1;
  }

  // Linear tile t in [0, total()) -> virtual block (x, y, z). In 32-bit arithmetic when the grid
  // has < 2^31 tiles (every real launch): fewer instructions than 64-bit divisions, though not a
  // measured gain -- nvcc's 64-bit division already branches to a 32-bit path when both operands
  // fit, and the sm90 hand-off between tiles did not move with this (bench/sm90_trace.py,
  // docs/perf/sm90-notes.md).
  FA4_HD void coords(int64_t t, int* x, int* y, int* z) const {
    if (total() <= 0x7fffffff) {
      coords_as<uint32_t>(t, x, y, z);
    } else {
      coords_as<int64_t>(t, x, y, z);
    }
  }
  // With two phases (heavy_x > 0): the heavy tiles x < heavy_x in sections, then the rest as one
  // section with x offset by heavy_x. Only instances that walk dynamically compile this (the
  // branch costs the three-consumer D 64 producer its few spare registers).
  FA4_HD void coords_phased(int64_t t, int* x, int* y, int* z) const {
    const int64_t heavy = heavy_x * gy * gz;
    if (heavy_x <= 0 || t < heavy) {
      if (total() <= 0x7fffffff) coords_as<uint32_t>(t, x, y, z, heavy_x > 0 ? heavy_x : gx, section);
      else coords_as<int64_t>(t, x, y, z, heavy_x > 0 ? heavy_x : gx, section);
      return;
    }
    if (total() <= 0x7fffffff) coords_as<uint32_t>(t - heavy, x, y, z, gx - heavy_x, gy * gz);
    else coords_as<int64_t>(t - heavy, x, y, z, gx - heavy_x, gy * gz);
    *x += static_cast<int>(heavy_x);
  }
  // The same map in the arithmetic of I (tests compare the two); over an x range of width `w`
  // (default gx) in sections of `sec` pairs (default section).
  template <class I>
  FA4_HD void coords_as(int64_t t_, int* x, int* y, int* z) const {
    coords_as<I>(t_, x, y, z, gx, section);
  }
  template <class I>
  FA4_HD void coords_as(int64_t t_, int* x, int* y, int* z, int64_t w, int64_t sec_pairs) const {
    const I t = static_cast<I>(t_), ugy = static_cast<I>(gy), usec = static_cast<I>(sec_pairs);
    const I pairs = ugy * static_cast<I>(gz);
    const I full = usec * static_cast<I>(w);  // tiles of one full section
    const I sec = t / full;                     // every section before the last is full
    const I first = sec * usec;                 // first (y, z) pair of the section
    const I here = pairs - first < usec ? pairs - first : usec;  // pairs in it
    const I r = t - sec * full;
    const I pair = first + r % here;
    *x = static_cast<int>(r / here);
    *y = static_cast<int>(pair % ugy);
    *z = static_cast<int>(pair / ugy);
  }
};

}  // namespace fa4::cuda

