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

#include "cuda/sm90/fwd_config.h"

namespace fa4::cuda::sm90 {

// Head dims the gather instances cover: 64, 128, 256, unpadded (the copies move whole 16-byte
// pieces of 64-column chunks; padded columns would need a zero fill per piece).
constexpr bool gather_dims(int dqk, int dv) { return dqk == dv && (dqk == 64 || dqk == 128 || dqk == 256); }
// The tile a gathered problem runs: two consumers everywhere (D 64: the short_masked tile; the
// three-consumer one leaves the producer 32 registers with nothing to give), 128-key tiles at
// D 64 / 128 and 64-key ones at D 256 (the standard tiles; the 80-key long_keys tile is not
// gathered). D 128 split-KV launches also have the split_kv tile (the in-kernel merge).
constexpr Tile gather_tile(int dqk) { return dqk == 64 ? Tile::short_masked : Tile::standard; }
constexpr bool has_gather_instance(int dqk, int dv, Tile t) {
  return gather_dims(dqk, dv) && (t == gather_tile(dqk) || (t == Tile::split_kv && dqk == 128));
}

// The producer warpgroup's threads (all four warps load K / V) and the register split of a gather
// instance: 32 for the producer, 240 for each of the two consumers -- 128 x 32 + 256 x 240 = 65536,
// the whole register file of the SM at one CTA per SM (the TMA instances give the producer 24
// and leave 1024 registers unused). The consumers keep the TMA instances' 240.
constexpr int kGatherThreads = 128;
constexpr int kGatherProducerRegs = 32;
constexpr int kGatherConsumerRegs = 240;
static_assert(kGatherThreads * kGatherProducerRegs + 2 * 128 * kGatherConsumerRegs <= 65536, "one SM's registers");

}  // namespace fa4::cuda::sm90
