// The gather instances of the sm90 forward kernel (FA4_SM90_PAGED_GATHER, fwd_config.h): paged KV
// caches whose pages the TMA boxes serve badly (1, 3, 16, 32 rows, any size that is neither a
// multiple of the key tile nor a sub-tile page the TMA path takes, cuda/plan.cpp sm90_pages_fit).
// Host- and device-visible (the planner reads it; fwd_gather.cuh is the device side).
//
// What differs from the TMA instances of the same tile: the whole producer warpgroup (128
// threads, not one elected lane) loads K / V, each thread copying 16-byte pieces of key rows by
// cp.async into the 128-byte-swizzled ring slots a TMA box would fill, every row's address from
// the page table (page = block_table[b][key / page_size], row key % page_size); the ring's full
// barriers then count 128 arrivals (cp.async.mbarrier.arrive.noinc, one per producer thread)
// instead of one arrival plus the TMA's bytes. Q still comes by TMA. The consumers and the
// epilogue are those of the TMA instance, unchanged.
#pragma once

#include <cstdint>

#include "cuda/sm90/fwd_config.h"

namespace fa4::cuda::sm90 {

// Head dims the gather instances cover: 64, 128, 256, unpadded (the copies move whole 16-byte
// pieces of 64-column chunks; padded columns would need a zero fill per piece).
constexpr bool gather_dims(int dqk, int dv) { return dqk == dv && (dqk == 64 || dqk == 128 || dqk == 256); }
// The tile a gathered problem runs: two consumers everywhere (D 64: the short_masked tile, the
// decode tile already; the three-consumer prefill tile has no gather twin yet), 128-key tiles at
// D 64 / 128 and 64-key ones at D 256 (the standard tiles; the 80-key long_keys tile is not
// gathered); and the split_kv tile of each (the in-kernel merge of a split-KV launch, where the
// planner takes it: sm90::split_kv_pays).
constexpr Tile gather_tile(int dqk) { return dqk == 64 ? Tile::short_masked : Tile::standard; }
constexpr bool has_gather_instance(int dqk, int dv, Tile t) {
  return gather_dims(dqk, dv) && (t == gather_tile(dqk) || t == Tile::split_kv);
}

// The producer warpgroup's threads: all four warps load K / V. The register split is the TMA
// instances' (fwd_schedule.h: producer 24, consumers 240): setmaxnreg moves registers within the
// CTA's own pool, 384 threads x 168 at launch = 64512, so 128 p + 256 c <= 64512 (a producer of 32
// beside consumers of 240 would leave setmaxnreg.inc waiting forever). ptxas fits the gather
// producer into 24 without local memory at D 64 / 128; at D 256 it spills 3 registers (stored at
// entry, reloaded once per query tile, not per key tile). 40 / 232 instead: no producer spill,
// but the D 256 consumers' local ops 4 -> 16 (compiled 2026-12-05).
constexpr int kGatherThreads = 128;

// Who copies what in a gather load of a kBlockN-key slot (fwd_gather.cuh KvGather::load; host-visible
// for tests/test_sm90_gather.cpp). Warp w of the producer warpgroup fills the slot's key rows
// [w kRowsPerWarp, (w + 1) kRowsPerWarp); lane l of it reads the page-table entry of row
// entry_row(w, l) (one coalesced load per warp); one copy instruction of the warp moves 4 rows x
// 128 bytes of one 64-column chunk (lane l: the 16-byte piece l % 8 of row 4 i + l / 8 of the
// warp's rows in step i, kSteps steps per chunk), that row's address shuffled from lane
// src_lane(l, i). A slot chunk is [kBlockN rows][128 bytes] with TMA's 128-byte swizzle (the piece
// p of row r at 128 r + 16 (p ^ (r % 8)), as the wgmma descriptors read it); a warp's rows start at
// a multiple of 8, so step i's swizzle is (l / 8) ^ (4 (i % 2)): dst(dst0(w, l), i), the XOR a flip
// of address bit 6 (a 1024-byte aligned slot keeps bits 4-6 for the piece alone).
template <int kBlockN>
struct GatherMap {
  static constexpr int kRowsPerWarp = kBlockN / 4;
  static constexpr int kSteps = kRowsPerWarp / 4;
  static_assert(kBlockN % 32 == 0 && kRowsPerWarp <= 32, "each warp's rows start on a swizzle atom; a lane per row");
  static constexpr int entry_row(int warp, int lane) { return warp * kRowsPerWarp + lane % kRowsPerWarp; }
  static constexpr int src_lane(int lane, int i) { return 4 * i + lane / 8; }
  static constexpr int copy_row(int warp, int lane, int i) { return warp * kRowsPerWarp + src_lane(lane, i); }
  static constexpr uint32_t dst0(int warp, int lane) {
    return static_cast<uint32_t>((warp * kRowsPerWarp + lane / 8) * 128 + (((lane % 8) ^ (lane / 8)) << 4));
  }
  static constexpr uint32_t dst(uint32_t d0, int i) { return (d0 ^ static_cast<uint32_t>((i % 2) << 6)) + static_cast<uint32_t>(i) * 512u; }
};

// Element offset, in a paged k or v, of the row `rip` of page-table entry `page` (page stride s0,
// row stride s1): the entry clamped to the cache's `pages` as every kernel clamps it
// (common/seq_info.cuh, TileWork::kv_coords) -- a bad page table reads wrong rows, never out of
// bounds.
constexpr int64_t gather_row_elems(int32_t page, int rip, int64_t s0, int64_t s1, int64_t pages) {
  const int64_t pg = page < 0 ? 0 : (page >= pages ? pages - 1 : page);
  return pg * s0 + static_cast<int64_t>(rip) * s1;
}

}  // namespace fa4::cuda::sm90
