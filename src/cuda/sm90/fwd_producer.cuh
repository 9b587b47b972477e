// The load role of the sm90 forward kernel: the producer warp walks the tiles (all 32 lanes:
// the varlen tile search is warp-collective) and one elected lane issues every TMA copy of the
// CTA, tile after tile of the persistent schedule -- per tile Q (every consumer's
// 64 rows on one barrier) and per key tile K into the K ring and V into the V ring (separate
// rings, so S = Q K^T of tile t + 1 can start while V of tile t is still in flight). The rings
// and the Q barriers run on across tiles, so the next tile's loads start while the consumers
// finish the current one. e4m3 instances (T::kFp8) load V^T tiles of the call's pre-pass
// workspace (fp8_layout.h) instead of V: one [Dv rows][128 keys] box per key tile -- unless they
// transpose V themselves (T::kVtConvert, below). fp8_kv
// instances (T::kFp8Kv) load the e4m3 cache's K / V boxes into the byte rings instead, which the
// converter warps widen into the K / V rings (fwd_fp8_kv.cuh): the same boxes and coordinates,
// 128-column (128-byte) chunks. With FA4_SM90_FP8_VT_IN_KERNEL the e4m3 tile's V rows land so in a
// byte ring, which the converter warps transpose into the V^T ring (fwd_fp8_vt_convert.cuh).
#pragma once

#include "cuda/common/pipeline.cuh"
#include "cuda/ptx/sm90_ptx.cuh"
#include "cuda/sm90/fp8_layout.h"
#include "cuda/sm90/fwd_fp8_kv.h"
#include "cuda/sm90/fwd_params.h"
#include "cuda/sm90/fwd_trace.cuh"
#include "cuda/sm90/fwd_work.cuh"

namespace fa4::cuda::sm90 {

template <class T>
__device__ __forceinline__ void produce(const Sm90Params& P, typename T::Smem& sh) {
  // (Gather instances, fwd_gather.cuh: all four producer warps run this, T::Gather loads K / V.)
  constexpr bool kGather = requires { typename T::Gather; };
  const bool leader = ptx::elect_one_sync() && (!kGather || threadIdx.x < 32);
  constexpr int kBlockN = T::kBlockN;
  constexpr int kEb = static_cast<int>(sizeof(typename T::Elem));
  constexpr int kKvEb = kv_cache_bytes(T::kTile);  // (fp8_kv: e4m3 cache bytes)
  constexpr int kQBytes = T::kBlockM * T::kDqk * kEb;
  constexpr int kKBytes = kBlockN * T::kDqk * kKvEb;
  constexpr int kVBytes = kBlockN * T::kDv * kKvEb;
  constexpr int kChunk = T::kChunk;  // columns of a Q / K box
  // Columns of a K / V box (one 128-byte swizzle row) and the slot it lands in: the K / V ring's
  // chunk ch, or (fp8_kv) the byte ring's -- [kBlockN][128 bytes] chunks either way.
  constexpr int kKvCols = T::kFp8Kv ? kFp8KvByteCols : kChunk;
  constexpr int kVCols = T::kFp8Kv ? kFp8KvByteCols : 64;
  auto k_dst = [&sh](int s, int ch) -> uint8_t* {
    if constexpr (T::kFp8Kv) return sh.kb(s) + ch * kBlockN * kFp8KvByteCols;
    else return reinterpret_cast<uint8_t*>(sh.k[s][ch]);
  };
  auto v_dst = [&sh](int s, int ch) -> uint8_t* {
    if constexpr (T::kFp8Kv) return sh.vb(s) + ch * kBlockN * kFp8KvByteCols;
    else return reinterpret_cast<uint8_t*>(sh.v[s][ch]);
  };
  if (leader) {
    ptx::tma_prefetch_descriptor(&P.tm_q);
    ptx::tma_prefetch_descriptor(&P.tm_k);
    ptx::tma_prefetch_descriptor(&P.tm_v);
  }

  PipelineState<T::Smem::kTmaStages> st;  // the rings run on across tiles (fp8_kv: the byte rings)
  uint32_t tiles_done = 0;       // tiles whose Q was loaded: the q_full / q_empty phase
  uint64_t* const tr = leader ? P.trace : nullptr;
  // Balanced walk (T::kBalanced instances, sched.balanced_n > 0): step r of this CTA's walk
  // (common/tile_schedule.h piece) is tile t's key tiles [lo, hi), whole (cut -1) or a piece
  // (cut = its piece code); published as split = -1 - cut, which the kernel's consumers read.
  // (Recomputed from r in run_tile, not carried across the tile's loads: the producer has 24
  // registers.)
  constexpr bool kBalanced = T::kBalanced && !kGather;
  bool balanced = false;
  if constexpr (kBalanced) balanced = P.sched.balanced_n > 0;
  int64_t r = 0;  // the walk's step
  // Loads tile t of the schedule (nothing for a tile without rows).
  auto run_tile = [&](int64_t t) {
    trace::stamp(tr, 0, tiles_done, trace::walk_start);
    TileWork w;
    if (!w.template init<T::kDynamicWalk>(P.a, P.sched, t, T::kBlockM, kBlockN)) return;
    if constexpr (kBalanced) {
      int64_t t2, cut;
      int lo, hi;
      if (balanced && P.sched.piece(r, blockIdx.x, gridDim.x, &t2, &lo, &hi, &cut))
        w.n_lo = lo, w.n_hi = hi, w.split = cut >= 0 ? -1 - static_cast<int>(cut) : 0;
    }
    const int n = w.n_tiles();
    trace::stamp(tr, 0, tiles_done, trace::tile_start);
    trace::key_tiles(tr, 0, tiles_done, n);
    // K / V of a key tile at TMA coordinates (row, batch-like index bl) from w.kv_coords (paged:
    // one page-table read per key tile, shared by its K and V).
    // (FA4_SM90_PAGED_SUB) Pages smaller than the key tile: one box per page (load_pages).
    auto load_k = [&](int row, int bl) {
      uint64_t* kb = sh.k_tma_ring().acquire(st, kKBytes, leader);
      if (leader) {
#pragma unroll
        for (int ch = 0; ch < T::kDqk / kKvCols; ++ch) ptx::tma_load_4d(k_dst(st.index, ch), &P.tm_k, kb, ch * kKvCols, w.hk, row, bl);
      }
      __syncwarp();
    };
    // (e4m3: row = the key tile's first V^T column, bl its batch-like index: vt_coords; with
    // FA4_SM90_FP8_VT_IN_KERNEL V's own rows as K's, into the V byte ring, the slot's keys inside
    // the sequence written first for the converters: j0 is the tile's first key.)
    auto load_v = [&](int row, int bl, [[maybe_unused]] int j0) {  // and on to the next ring slot
      if constexpr (T::kVtConvert) {
        ptx::mbarrier_wait_parity(&sh.vtb.bars.empty[st.index], st.phase ^ 1u);
        if (leader) {
          sh.vtb.rows[st.index] = w.sk - j0;  // (published by the arrival's release)
          ptx::mbarrier_arrive_expect_tx(&sh.vtb.bars.full[st.index], kVBytes);
          ptx::tma_load_4d(sh.vb(st.index), &P.tm_v, &sh.vtb.bars.full[st.index], 0, w.hk, row, bl);
        }
        __syncwarp();
        st.advance();
        return;
      }
      uint64_t* vb = sh.v_tma_ring().acquire(st, kVBytes, leader);
      if (leader) {
        if constexpr (T::kFp8) {
          // V^T map (cols, dims, heads, bl): boxes of kVtKeys key columns x Dv dims.
#pragma unroll
          for (int ch = 0; ch < T::Smem::kVChunks; ++ch)
            ptx::tma_load_4d(sh.v[st.index][ch], &P.tm_v, vb, row + ch * T::Smem::kVtKeys, 0, w.hk, bl);
        } else {
#pragma unroll
          for (int ch = 0; ch < T::kDv / kVCols; ++ch) ptx::tma_load_4d(v_dst(st.index, ch), &P.tm_v, vb, ch * kVCols, w.hk, row, bl);
        }
      }
      __syncwarp();
      st.advance();
    };
    // (e4m3) The V^T coordinates of the key tile at key j0 (fp8_layout.h): dense k and caches by
    // batch (not cache_batch_idx: the pre-pass gathered each batch's rows), varlen k at its
    // sequence's columns.
    [[maybe_unused]] auto vt_coords = [&](int j0, int* col, int* bl) {
      if (P.a.kv_mode == kKvVarlen)
        *col = static_cast<int>(fp8_vt_col0(w.kv_row0, w.batch, fp8_vt_pad(kBlockN))) + j0, *bl = 0;
      else
        *col = j0, *bl = w.batch;
    };
    // The key tile at key j0 of a cache whose pages (ps rows) are smaller than the tile: the
    // planner takes page sizes that divide the key block and are multiples of 8 rows, so each
    // page's box starts on a 1024-byte swizzle atom of the slot and the slot's layout is that of
    // one whole-tile box. Lane l reads the page-table entry of sub-tile l (one parallel load), the
    // leader issues the boxes; the ring barrier expects the whole tile's bytes as before.
    auto load_pages = [&](int j0, bool k) {
      const int ps = static_cast<int>(P.a.page_size);
      const int lane = threadIdx.x % 32;
      int row = 0, bl = 0;
      // (Sub-tiles past the sequence's last key read no page-table entry -- the table may end
      // there -- and load page 0: zeroed (V) or masked (K) by the consumers as any row past sk.)
      if (lane * ps < kBlockN && j0 + lane * ps < w.sk) w.kv_coords(P.a, j0 + lane * ps, &row, &bl);
      uint64_t* b = k ? sh.k_tma_ring().acquire(st, kKBytes, leader) : sh.v_tma_ring().acquire(st, kVBytes, leader);
      for (int sub = 0; sub * ps < kBlockN; ++sub) {
        const int r = __shfl_sync(0xffffffffu, row, sub), bi = __shfl_sync(0xffffffffu, bl, sub);
        if constexpr (T::kFp8) {
          (void)r, (void)bi;  // (never: no paged e4m3 calls on sm90, cuda/plan.cpp sm90_supports)
        } else if (leader) {
          // (a box row is 128 bytes: 64 16-bit columns, or 128 e4m3 ones)
          if (k) {
#pragma unroll
            for (int ch = 0; ch < T::kDqk / kKvCols; ++ch)
              ptx::tma_load_4d(k_dst(st.index, ch) + sub * ps * 128, &P.tm_k, b, ch * kKvCols, w.hk, r, bi);
          } else {
#pragma unroll
            for (int ch = 0; ch < T::kDv / kVCols; ++ch)
              ptx::tma_load_4d(v_dst(st.index, ch) + sub * ps * 128, &P.tm_v, b, ch * kVCols, w.hk, r, bi);
          }
        }
      }
      __syncwarp();
      if (!k) st.advance();
    };
    const bool sub_pages = !T::kFp8 && FA4_SM90_PAGED_SUB && P.a.kv_mode == kKvPaged && P.a.page_size < kBlockN;
    auto load_q = [&]() {  // every tile loads it, empty ones too: the q barriers' phases count tiles
      trace::stamp(tr, 0, tiles_done, trace::q_wait_start);
      if (tiles_done > 0) ptx::mbarrier_wait_parity(&sh.q_empty, (tiles_done - 1) & 1u);
      // Publish the tile to the consumers, after the previous tile's Q was released: they have
      // then waited for the previous work_full phase (a second unwaited completion would alias
      // its parity) and read the slot's tile before this one (two tiles back).
      if (leader) {
        sh.work[tiles_done & 1u].w = w;
        sh.work[tiles_done & 1u].valid = 1;
        ptx::mbarrier_arrive(&sh.work_full);  // release: the writes before the phase completes
      }
      if (leader) {
        ptx::mbarrier_arrive_expect_tx(&sh.q_full, kQBytes);
#pragma unroll
        for (int c = 0; c < T::kConsumers; ++c)
#pragma unroll
          for (int ch = 0; ch < T::kDqk / kChunk; ++ch)
            ptx::tma_load_4d(sh.q[c][ch], &P.tm_q, &sh.q_full, ch * kChunk, w.head, w.q_row + c * TileWork::q_step(P.a),
                             w.q_b);
      }
      __syncwarp();
    };
    // The tile's first loads in the order their slots free up under the previous tile: K (its
    // ring slot frees after an S = Q K^T), then Q (released after the last S when O has its own
    // staging tile, else after the epilogue), then V (after the last P V). (Q was issued behind
    // the first V before; the consumers' wait for Q, ~5 % of their time at D 128 S 1k causal, did
    // not change with this order: Q is issued ~2 us before they are ready and is 2.1-2.5 us in
    // flight, bench/sm90_trace.py, docs/perf/sm90-notes.md.)
    // (kOInV) The previous tile's O is staged over the V ring until its epilogue has read it:
    // every tile waits for that phase (in order: a skipped phase would alias the parity).
    auto wait_o = [&]() {
      if (T::kOInV && tiles_done > 0) ptx::mbarrier_wait_parity(&sh.o_empty, (tiles_done - 1) & 1u);
    };
    // (Tile 0's coordinates are computed again for its V rather than kept across the Q load:
    // live there, they spilled in the producer's 24 registers.)
    auto load_kv0 = [&](bool k) {
      if constexpr (kGather) {
        T::Gather::load(P, sh, st, w, w.tile_at(0) * kBlockN, k);
        if (!k) st.advance();  // (as load_v)
        return;
      }
      if (sub_pages) return load_pages(w.tile_at(0) * kBlockN, k);
      int row, bl;
      if (T::kFp8 && !T::kVtConvert && !k) vt_coords(w.tile_at(0) * kBlockN, &row, &bl);
      else w.kv_coords(P.a, w.tile_at(0) * kBlockN, &row, &bl);
      if (k) load_k(row, bl);
      else load_v(row, bl, w.tile_at(0) * kBlockN);
    };
    if (n > 0) load_kv0(true);
    if (T::kQFreeEarly) {
      load_q();
      wait_o();
      if (n > 0) load_kv0(false);
    } else {
      if (n > 0) load_kv0(false);
      load_q();
    }
    trace::stamp(tr, 0, tiles_done, trace::q_issued);
    for (int it = 1; it < n; ++it) {
      if constexpr (kGather) {
        T::Gather::load(P, sh, st, w, w.tile_at(it) * kBlockN, true);
        T::Gather::load(P, sh, st, w, w.tile_at(it) * kBlockN, false);
        st.advance();
        continue;
      }
      if (sub_pages) {
        load_pages(w.tile_at(it) * kBlockN, true), load_pages(w.tile_at(it) * kBlockN, false);
        continue;
      }
      int row, bl;
      w.kv_coords(P.a, w.tile_at(it) * kBlockN, &row, &bl);
      load_k(row, bl);
      if constexpr (T::kFp8 && !T::kVtConvert) vt_coords(w.tile_at(it) * kBlockN, &row, &bl);
      load_v(row, bl, w.tile_at(it) * kBlockN);
    }
    trace::stamp(tr, 0, tiles_done, trace::loads_issued);
    ++tiles_done;
  };
  // The walk. Static: round r's tile of this CTA (common/tile_schedule.h). Dynamic (long masked
  // problems, fwd_config.h dynamic_walk): the first round as the static one, then the next
  // unclaimed tile, claimed once the current tile's loads are all issued -- ~2 ring stages before
  // the consumers finish it, so the atomic's round trip hides under them, and late enough that
  // CTAs which drew heavy tiles take fewer (claimed when a tile starts, the CTAs took tiles in
  // start order, a static round robin: -5 to -14 %; docs/perf/sm90-notes.md).
  // Balanced: the whole rounds, then this CTA's pieces of the last round (TileSchedule::piece).
  bool dynamic = false;
  if constexpr (T::kDynamicWalk) dynamic = P.sched.dynamic != 0;
  // One loop for every walk (run_tile inlined once: the producer has 24 registers).
  int64_t t = P.sched.tile_for(0, blockIdx.x, gridDim.x);  // the first round: blockIdx.x
  auto next_piece = [&]() {  // the tile of step r of the share, or -1 past it
    int64_t tt, cut;
    int lo, hi;
    return P.sched.piece(r, blockIdx.x, gridDim.x, &tt, &lo, &hi, &cut) ? tt : int64_t{-1};
  };
  if (balanced) t = next_piece();
  for (;;) {
    if (t >= 0) run_tile(t);
    if (dynamic) {
      uint32_t c = 0;
      if (threadIdx.x == 0) c = atomicAdd(P.tile_counter, 1u);
      t = gridDim.x + static_cast<int64_t>(__shfl_sync(0xffffffffu, c, 0));  // warp-uniform
      if (t >= P.sched.total()) break;
    } else if (balanced) {
      ++r;
      if (t < 0 || (t = next_piece()) < 0) break;
    } else {
      if (++r >= P.sched.rounds(gridDim.x)) break;
      t = P.sched.tile_for(r, blockIdx.x, gridDim.x);
    }
  }
  // The end of the walk, published as a tile is (after the last tile's Q was released).
  if (tiles_done > 0) ptx::mbarrier_wait_parity(&sh.q_empty, (tiles_done - 1) & 1u);
  if (leader) {
    sh.work[tiles_done & 1u].valid = 0;
    ptx::mbarrier_arrive(&sh.work_full);
  }
  // (FA4_SM90_FP8_VT_IN_KERNEL) and to the converters, as a V byte slot without bytes.
  if constexpr (T::kVtConvert) {
    ptx::mbarrier_wait_parity(&sh.vtb.bars.empty[st.index], st.phase ^ 1u);
    if (leader) {
      sh.vtb.rows[st.index] = T::Smem::kVtEnd;
      ptx::mbarrier_arrive(&sh.vtb.bars.full[st.index]);
    }
  }
  // Every CTA has made its last claim (one past the end) before it counts itself finished (the
  // fence orders the two atomics); the last to finish zeroes the pair for the next launch.
  if (dynamic && threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(P.tile_counter + 1, 1u) == gridDim.x - 1) {
      atomicExch(P.tile_counter, 0u);
      atomicExch(P.tile_counter + 1, 0u);
    }
  }
  __syncwarp();
}

}  // namespace fa4::cuda::sm90
