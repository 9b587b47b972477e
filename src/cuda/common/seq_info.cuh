// Per-sequence lengths and row addressing on the device.
//
// The index tensors live in device memory and were not validated on the host (reading them there
// would need a synchronization), so every value read here is clamped into range: a bad
// cu_seqlens / cache_seqlens / page_table entry gives wrong (or, for a cu_seqlens_q that
// decreases, unwritten) output rows but never an out-of-bounds access. (The varlen tile grid is
// sized for a non-decreasing cu_seqlens_q, as the API requires; overlapping sequences need more
// tiles than it holds.)
#pragma once

#include <cstdint>

#include "cuda/common/fwd_args.h"

namespace fa4::cuda {

__device__ __forceinline__ int64_t clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }

struct SeqInfo {
  int64_t sq = 0, sk = 0;
  int64_t q_base = 0, q_step = 0;    // element offset of query row i: q_base + i * q_step
  int64_t o_base = 0, o_step = 0;    // same for out
  int64_t token0 = 0;                // token index of query row 0 (row of the split partials)
  int64_t kv_a = 0;                  // non-paged: first-dim index of the sequence's key 0
  int32_t b = 0;

  __device__ __forceinline__ void init(const FwdArgs& p, int32_t batch_idx) {
    b = batch_idx;
    if (p.varlen_q) {
      const int64_t s = clamp64(p.cu_q[b * p.cu_q_st], 0, p.total_q);
      const int64_t e = clamp64(p.cu_q[(b + 1) * p.cu_q_st], s, p.total_q);
      sq = e - s;
      q_base = s * p.q_s0, q_step = p.q_s0;
      o_base = s * p.o_s0, o_step = p.o_s0;
      token0 = s;
    } else {
      sq = p.sq_dense;
      q_base = b * p.q_s0, q_step = p.q_s1;
      o_base = b * p.o_s0, o_step = p.o_s1;
      token0 = static_cast<int64_t>(b) * p.sq_dense;
    }
    switch (p.kv_mode) {
      case kKvDense:
        sk = p.kv_slot;
        if (p.seqused_k) sk = clamp64(p.seqused_k[b * p.seqused_st], 0, sk);
        kv_a = b;
        break;
      case kKvVarlen: {
        const int64_t s = clamp64(p.cu_k[b * p.cu_k_st], 0, p.kv_rows0);
        const int64_t e = clamp64(p.cu_k[(b + 1) * p.cu_k_st], s, p.kv_rows0);
        sk = e - s;
        if (p.seqused_k) sk = clamp64(p.seqused_k[b * p.seqused_st], 0, sk);
        kv_a = s;
        break;
      }
      default: {  // cache / paged
        sk = p.cache_seqlens ? clamp64(static_cast<int64_t>(p.cache_seqlens[b * p.cache_seqlens_st]) + p.snew, 0, p.kv_slot)
                             : p.kv_slot;
        kv_a = (p.kv_mode == kKvCache && p.cache_batch_idx) ? clamp64(p.cache_batch_idx[b * p.cbi_st], 0, p.kv_rows0 - 1)
                                                            : b;
        break;
      }
    }
  }
  // Offset in p.lse of query row i's lse at head 0 (head h: + h * p.lse_sh).
  __device__ __forceinline__ int64_t lse_row(const FwdArgs& p, int64_t i) const {
    return p.varlen_q ? (token0 + i) * p.lse_si : static_cast<int64_t>(b) * p.lse_sb + i * p.lse_si;
  }
};

// Varlen q with p.varlen_tiles: linear tile index `idx` -> (sequence b, its tile `local`, its tile
// count). Sequence b has ceil(rows_b / rows_per_tile) tiles, rows_b = its query rows (x the GQA
// group with PackGQA), laid out in batch order. Each warp scans cu_seqlens_q 32 sequences at a
// time (warp prefix sum), so a CTA costs O(batch / 32) steps and the grid needs no more than
// sum_b tiles_b + batch CTAs instead of batch x ceil(total / rows_per_tile). Warp-uniform result;
// false when idx is past the last tile.
__device__ __forceinline__ bool find_varlen_tile(const FwdArgs& p, int rows_per_tile, int idx, int* b_out, int* local_out,
                                                 int* tiles_out) {
  const int lane = threadIdx.x & 31;
  const int64_t rows_mul = p.pack_gqa ? p.group : 1;
  // 64-bit sums: valid input stays far below 2^31 tiles, but a corrupt (overlapping)
  // cu_seqlens_q could add up past it.
  long long acc = 0;  // tiles of the sequences before this chunk of 32
  for (int b0 = 0; b0 < p.batch; b0 += 32) {
    const int b = b0 + lane;
    long long tiles = 0;
    if (b < p.batch) {
      const int64_t s = clamp64(p.cu_q[b * p.cu_q_st], 0, p.total_q);
      const int64_t e = clamp64(p.cu_q[(b + 1) * p.cu_q_st], s, p.total_q);
      tiles = ((e - s) * rows_mul + rows_per_tile - 1) / rows_per_tile;
    }
    long long incl = tiles;  // inclusive prefix sum over the lanes
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const long long y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    const long long excl = incl - tiles;
    const unsigned hit = __ballot_sync(0xffffffffu, tiles > 0 && idx >= acc + excl && idx < acc + incl);
    if (hit != 0u) {
      const int src = __ffs(hit) - 1;
      *b_out = b0 + src;
      *local_out = static_cast<int>(idx - acc - __shfl_sync(0xffffffffu, excl, src));  // < its tile count
      *tiles_out = static_cast<int>(__shfl_sync(0xffffffffu, tiles, src));  // one sequence: < 2^31 rows
      return true;
    }
    acc += __shfl_sync(0xffffffffu, incl, 31);
  }
  return false;
}

// The query tile of virtual block (bx, -, bz) of a grid gx wide: (m_block within its sequence,
// batch, split). Varlen tiles (kVarlen, and p.varlen_tiles unless kAlwaysVarlen): bx walks the
// tiles of all sequences back to back (find_varlen_tile) and bz is the split; otherwise bx is the
// tile and bz = batch x split. With a causal / windowed mask later tiles see more keys, so tiles
// are taken in reverse (within each sequence): the long CTAs start first instead of forming the
// tail of the grid. False (uniform over the CTA) for a block past the last varlen tile.
template <bool kVarlen, bool kAlwaysVarlen = false>
__device__ __forceinline__ bool query_tile(const FwdArgs& p, int rows_per_tile, int bx, int gx, int bz, int* m_block,
                                          int* batch, int* split) {
  if (kVarlen && (kAlwaysVarlen || p.varlen_tiles)) {
    int local, tiles;
    if (!find_varlen_tile(p, rows_per_tile, bx, batch, &local, &tiles)) return false;
    *m_block = p.mask.right >= 0 ? tiles - 1 - local : local;
    *split = bz;
  } else {
    *m_block = p.mask.right >= 0 ? gx - 1 - bx : bx;
    *batch = bz, *split = 0;
    if (p.num_splits > 1) *batch = bz / p.num_splits, *split = bz % p.num_splits;
  }
  return true;
}
// The CTA's own query tile (one CTA per tile of the launch grid).
template <bool kVarlen, bool kAlwaysVarlen = false>
__device__ __forceinline__ bool cta_tile(const FwdArgs& p, int rows_per_tile, int* m_block, int* batch, int* split) {
  return query_tile<kVarlen, kAlwaysVarlen>(p, rows_per_tile, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x),
                                           static_cast<int>(blockIdx.z), m_block, batch, split);
}

// Key tiles [*n_lo, *n_hi) (tile_keys keys each) that query rows i_first ..= i_last of one
// sequence see under the mask, clamped to its sk keys, then this split's equal share of them
// (every kernel splits the same way; the combine does not care how keys are split).
__device__ __forceinline__ void key_tiles(const FwdArgs& p, const SeqInfo& si, int64_t i_first, int64_t i_last, int sk,
                                          int tile_keys, int split, int* n_lo_out, int* n_hi_out) {
  const core::SeqMask sm{p.mask, si.sq, si.sk};
  int64_t klo, khi;
  sm.key_range(i_first, i_last + 1, &klo, &khi);
  if (klo > sk) klo = sk;
  if (khi > sk) khi = sk;
  int n_lo = static_cast<int>(klo / tile_keys);
  int n_hi = khi > klo ? static_cast<int>((khi + tile_keys - 1) / tile_keys) : n_lo;
  if (p.num_splits > 1) {
    const int per = (n_hi - n_lo + p.num_splits - 1) / p.num_splits;
    const int lo = n_lo + split * per;
    n_lo = lo < n_hi ? lo : n_hi;
    n_hi = lo + per < n_hi ? lo + per : n_hi;
  }
  *n_lo_out = n_lo, *n_hi_out = n_hi;
}

// TMA (row, batch-like) coordinates of the paged key tile starting at key j0 of sequence `batch`,
// when pages hold whole key tiles: row j0 % page of the page its page-table entry names, the entry
// clamped to the cache's pages (a bad page table reads wrong rows, never out of bounds).
__device__ __forceinline__ void paged_tile_coords(const FwdArgs& p, int batch, int j0, int* row, int* bl) {
  const int ps = static_cast<int>(p.page_size);
  const int pi = j0 / ps;
  const int32_t page = p.page_table[static_cast<int64_t>(batch) * p.pt_s0 + static_cast<int64_t>(pi) * p.pt_s1];
  *bl = page < 0 ? 0 : (page >= p.kv_rows0 ? static_cast<int>(p.kv_rows0 - 1) : page);
  *row = j0 - pi * ps;
}

// Element offsets of key row j of one sequence in k (or v, with its strides): dense / cache rows
// advance along dim 1, varlen rows along dim 0, paged rows go through the page table.
struct KvAddr {
  int64_t base = 0, step = 0;  // non-paged: base + j * step
  int64_t s0 = 0, s1 = 0;      // paged: page * s0 + (j % page_size) * s1
  const int32_t* pt_row = nullptr;
  int64_t pt_s1 = 1, num_pages = 1;
  int32_t page_size = 1;
  bool paged = false;

  __device__ __forceinline__ void init(const FwdArgs& p, const SeqInfo& si, int64_t ts0, int64_t ts1, int64_t tsh,
                                       int32_t hk) {
    paged = p.kv_mode == kKvPaged;
    s0 = ts0, s1 = ts1;
    if (paged) {
      base = hk * tsh;
      pt_row = p.page_table + si.b * p.pt_s0;
      pt_s1 = p.pt_s1, page_size = static_cast<int32_t>(p.page_size), num_pages = p.kv_rows0;
    } else {
      base = si.kv_a * ts0 + hk * tsh;
      step = p.kv_mode == kKvVarlen ? ts0 : ts1;
    }
  }
  // j: key position within the sequence (< 2^31); 32-bit division for the page index.
  __device__ __forceinline__ int64_t row(int32_t j) const {
    if (!paged) return base + static_cast<int64_t>(j) * step;
    const int32_t pi = j / page_size;
    const int64_t page = clamp64(pt_row[pi * pt_s1], 0, num_pages - 1);
    return base + page * s0 + static_cast<int64_t>(j - pi * page_size) * s1;
  }
};

}  // namespace fa4::cuda
