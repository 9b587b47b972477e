// One tile of work of the sm90 forward kernel, computed identically by every role from the
// linear tile index of the persistent schedule (common/tile_schedule.h): which (batch, head,
// block_m-row query tile), the sequence's lengths, and the key tiles its mask sees. Producer and
// consumers derive the same loop bounds from it, so the rings stay in step.
#pragma once

#include <climits>
#include <cstdint>

#include "cuda/common/fwd_args.h"
#include "cuda/common/seq_info.cuh"
#include "cuda/common/tile_schedule.h"
#include "cuda/sm90/fwd_config.h"

namespace fa4::cuda::sm90 {

// PackGQA (p.pack_gqa): the tile rows of one kv head are (query row, head in group) pairs, tile
// row m = query row m / group of query head `head` + m % group (head = the group's first), so
// one tile reads K / V once for the whole group. Each consumer's 64 rows then are 64 / group
// query rows x group heads: the Q tensor map's box is (64 columns, group heads, 64 / group rows)
// (fwd_launch.cpp), whose shared-memory row order is exactly m (the planner packs only groups
// dividing 64).
struct TileWork {
  SeqInfo si;
  int batch = 0, split = 0, m_block = 0;
  int head = 0, hk = 0;   // query head (PackGQA: the group's first), kv head
  int rows_seq = 0;       // tile rows of this sequence: query rows (x group with PackGQA; < 2^31, cuda_check / planner)
  int m0 = 0;             // first tile row
  int sk = 0;             // keys of this sequence
  int n_lo = 0, n_hi = 0; // key tiles [n_lo, n_hi) the tile's rows see (this split's share of them)
  // TMA coordinates (fwd_params.h): consumer c's Q rows start at q_row + c * q_step(p) in
  // batch-like index q_b; keys at kv_row0 + j in kv_b -- except in a paged cache, where key j is
  // row j % page of the page its page-table row names (kv_coords).
  int q_row = 0, q_b = 0, kv_row0 = 0, kv_b = 0;

  // Tile t of the schedule. False (uniform over the CTA) when it has no rows to compute.
  // kPhased: the schedule may have two phases (instances that walk dynamically, fwd_config.h).
  template <bool kPhased>
  __device__ __forceinline__ bool init(const FwdArgs& p, const TileSchedule& sched, int64_t t, int block_m, int block_n) {
    int bx, by, bz;
    if constexpr (kPhased) sched.coords_phased(t, &bx, &by, &bz);
    else sched.coords(t, &bx, &by, &bz);
    if (!query_tile<true>(p, block_m, bx, static_cast<int>(sched.gx), bz, &m_block, &batch, &split)) return false;
    si.init(p, batch);
    const int gq = p.pack_gqa ? p.group : 1;  // tile rows per query row
    head = by * gq;
    hk = p.pack_gqa ? by : by / p.group;
    rows_seq = static_cast<int>(si.sq * gq);
    m0 = m_block * block_m;
    if (m0 >= rows_seq) return false;
    sk = static_cast<int>(si.sk < INT_MAX ? si.sk : INT_MAX);
    const int m_last = (m0 + block_m < rows_seq ? m0 + block_m : rows_seq) - 1;
    key_tiles(p, si, m0 / gq, m_last / gq, sk, block_n, split, &n_lo, &n_hi);
    if (p.varlen_q) q_row = static_cast<int>(si.token0), q_b = 0;
    else q_row = 0, q_b = batch;
    q_row += m0 / gq;
    if (p.kv_mode == kKvVarlen) kv_row0 = static_cast<int>(si.kv_a), kv_b = 0;
    else kv_row0 = 0, kv_b = static_cast<int>(si.kv_a);
    return true;
  }
  // The TMA (row, batch-like) coordinates of the key tile starting at key j0. Paged: the planner
  // takes only page sizes that are multiples of the key block (cuda/plan.cpp sm90_supports), so a
  // tile never straddles two pages; the entry is clamped to the cache's pages as every kernel
  // clamps it (common/seq_info.cuh KvRows): a bad page table reads wrong rows, never out of bounds.
  // (Compiled out without FA4_SM90_PAGED, which keeps the default kernels' SASS as it was; the
  // producer has 24 registers.)
  __device__ __forceinline__ void kv_coords(const FwdArgs& p, int j0, int* row, int* bl) const {
    if (!FA4_SM90_PAGED || p.kv_mode != kKvPaged) {
      *row = kv_row0 + j0, *bl = kv_b;
      return;
    }
    paged_tile_coords(p, batch, j0, row, bl);
  }
  // Query rows of one consumer's 64 tile rows. (Derived from the parameters, not kept in the
  // tile: one more live field spilled in the producer's 24 registers.)
  static __device__ __forceinline__ int q_step(const FwdArgs& p) {
    return p.pack_gqa ? kRowsPerConsumer / p.group : kRowsPerConsumer;
  }
  __device__ __forceinline__ int n_tiles() const { return n_hi - n_lo; }
  // Key tiles are walked from the last one down: the tiles that need a mask (the causal
  // diagonal, the ragged end of the sequence) come first, the unmasked bulk after, and the
  // ragged tile's V is the first one consumed (see the V tail zeroing in the consumer).
  __device__ __forceinline__ int tile_at(int it) const { return n_hi - 1 - it; }
};

// A tile's work as the producer publishes it in shared memory (fwd_smem.cuh): valid = 0 ends the
// walk.
struct PublishedWork {
  TileWork w;
  int32_t valid;
};

}  // namespace fa4::cuda::sm90
