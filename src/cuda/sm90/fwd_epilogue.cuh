// The epilogue of one sm90 consumer warpgroup: sink fold, 1 / l, lse (common/softmax.cuh's
// finalize_row), then O in the output dtype through 128-byte-swizzled shared memory (the
// consumer's O staging tile, or its own Q tile whose wgmma reads have completed: fwd_smem.cuh)
// and out with 16-byte stores, predicated on the sequence's last row and on a partial last chunk
// of an unpadded head dim.
#pragma once

#include <cmath>

#include <type_traits>

#include "cuda/combine/combine_row.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/ptx/sm80_ptx.cuh"
#include "cuda/ptx/sm90_ptx.cuh"
#include "cuda/sm90/fwd_consumer.cuh"

namespace fa4::cuda::sm90 {

// The merge of one consumer's rows (tile rows row0 ..) of every split into out / lse, by its 128
// threads: thread (row r, columns col0 .. col0 + kCols - 1), so a pass covers 128 / (Dv / kCols)
// rows, and every split's loads (its lse, its 16-byte column pieces) are independent of the
// running sums: they go in batches of splits, in flight together. (One warp per row, combine_row_warp, walked a decode
// tile's rows one after another: 4 dependent rows per warp at Sq 4 x GQA 4, 0.64x of the
// separate combine kernel; H200 2026-12-05.)
template <class Elem, int kDv, int kCols>
__device__ __forceinline__ void merge_rows_by(const FwdArgs& p, const TileWork& w, const int row0, const int tid) {
  constexpr int kOut = static_cast<int>(std::is_same_v<Elem, __half> ? DType::float16 : DType::bfloat16);
  constexpr int kThreadsPerRow = kDv / kCols, kRowsPerPass = 128 / kThreadsPerRow;
  constexpr int kBatch = kCols > 8 ? 4 : 8;  // splits in flight (registers: kBatch x kCols floats)
  static_assert(kCols % 4 == 0 && kDv % kCols == 0 && 128 % kThreadsPerRow == 0, "merge: whole 16-byte pieces per thread");
  const int64_t split_rows = p.rows_total * p.hq;  // partial rows per split
  const int col0 = (tid % kThreadsPerRow) * kCols;
  for (int r = tid / kThreadsPerRow; r < kRowsPerConsumer; r += kRowsPerPass) {
    const int m = row0 + r;
    if (m >= w.rows_seq) break;
    int i = m, head = w.head;
    if (p.pack_gqa) i = m / p.group, head += m - i * p.group;
    const int64_t prow = (w.si.token0 + i) * p.hq + head;  // split 0's row
    const float* lp = p.lse_part + prow;
    bool empty;
    const float lse = merged_lse(lp, split_rows, p.num_splits, &empty);  // (combine_row.cuh)
    float acc[kCols];
#pragma unroll
    for (int k = 0; k < kCols; ++k) acc[k] = 0.f;
    const float* op = p.o_part + prow * p.dv_pad + col0;
    if (!empty) {
      // kBatch splits' weights and column pieces in flight together (merged_lse's batches, which
      // say why), then merged in split order (the combine kernel's order: the same bits).
      for (int s0 = 0; s0 < p.num_splits; s0 += kBatch) {
        float lw[kBatch];
        float4 x[kBatch][kCols / 4];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int64_t s = merge_split(s0, j, p.num_splits);
          lw[j] = __ldcg(lp + s * split_rows);
          const float4* src = reinterpret_cast<const float4*>(op + s * split_rows * p.dv_pad);
#pragma unroll
          for (int q = 0; q < kCols / 4; ++q) x[j][q] = __ldcg(src + q);
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          // (past the last split: weight 0, which merge_term skips -- no branch, or the compiler
          // sinks each split's loads behind it and the batch is one round trip per split again)
          const float wt = s0 + j < p.num_splits ? __expf(lw[j] - lse) : 0.f;
#pragma unroll
          for (int q = 0; q < kCols / 4; ++q) {
            acc[4 * q] = merge_term(acc[4 * q], wt, x[j][q].x);
            acc[4 * q + 1] = merge_term(acc[4 * q + 1], wt, x[j][q].y);
            acc[4 * q + 2] = merge_term(acc[4 * q + 2], wt, x[j][q].z);
            acc[4 * q + 3] = merge_term(acc[4 * q + 3], wt, x[j][q].w);
          }
        }
      }
    }
    const int64_t out_off = w.si.o_base + i * w.si.o_step + head * p.o_sh + col0;
    Elem* dst = static_cast<Elem*>(p.out) + out_off;
    if (col0 + kCols <= p.dv && (reinterpret_cast<uintptr_t>(dst) & (kCols == 4 ? 7 : 15)) == 0) {
      uint32_t v[kCols / 2];
#pragma unroll
      for (int k = 0; k < kCols / 2; ++k) v[k] = ptx::pack2<Elem>(acc[2 * k], acc[2 * k + 1]);
      if constexpr (kCols == 4) {
        *reinterpret_cast<uint2*>(dst) = make_uint2(v[0], v[1]);
      } else {
#pragma unroll
        for (int k = 0; k < kCols / 8; ++k) reinterpret_cast<uint4*>(dst)[k] = make_uint4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
      }
    } else {  // a padded head dim's last piece, or an output row not 16-byte aligned
#pragma unroll
      for (int k = 0; k < kCols; ++k)
        if (col0 + k < p.dv) store_out(p.out, out_off + k, kOut, acc[k]);
    }
    if (tid % kThreadsPerRow == 0 && p.lse != nullptr) p.lse[w.si.lse_row(p, i) + head * p.lse_sh] = lse;
  }
}

// Columns per thread by the rows to merge: all 128 threads busy where the rows are few (a decode
// tile: 1-16 packed rows), 16 columns (four 16-byte loads per split) where they are many. Only in
// the split_kv instance (fwd_config.h fused_merge): inlined into the three-consumer D 64 tile it
// spilled 106 local ops into the key loop; called (not inlined) from the standard D 128 tile it
// cost that tile's prefill 3-4.5 % and the Sq 4 decode 4-9 % against inlined (H200 2026-12-05).
// FA4_SM90_CALLED_MERGE (fwd_config.h) calls it instead: inlined, its per-thread row loops make
// ptxas compile the split_kv instance's whole consumer loop as divergent.
#if FA4_SM90_CALLED_MERGE
#define FA4_SM90_MERGE_INLINING __noinline__
#else
#define FA4_SM90_MERGE_INLINING __forceinline__
#endif
template <class Elem, int kDv>
__device__ FA4_SM90_MERGE_INLINING void merge_split_rows(const FwdArgs& p, const TileWork& w, const int row0, const int tid) {
  const int rows = w.rows_seq - row0 < kRowsPerConsumer ? w.rows_seq - row0 : kRowsPerConsumer;
  if (rows * kDv <= 128 * 4) merge_rows_by<Elem, kDv, 4>(p, w, row0, tid);
  else if (rows * kDv <= 128 * 8) merge_rows_by<Elem, kDv, 8>(p, w, row0, tid);
  else merge_rows_by<Elem, kDv, 16>(p, w, row0, tid);
}

// (FA4_SM90_FUSED_COMBINE) After a consumer wrote its split's partial rows: one arrival on the
// counter of (tile, consumer); the split that arrives last merges the rows of every split
// (merge_split_rows) and zeroes the counter for the next launch.
// Every split of a tile computes the same counter index: its tiles are numbered from the
// sequence's first packed row, token0 * group / block_m + batch + m_block (unique: a sequence of
// r rows has at most ceil(r / block_m) tiles), times the grid heads, times the consumers.
template <class T>
__device__ __forceinline__ void merge_splits_if_last(const Sm90Params& P, Consumer<T>& cs, int row0) {
  const FwdArgs& p = cs.p;
  const TileWork& w = cs.w;
  const int tid = cs.tid;
  const int gq = p.pack_gqa ? p.group : 1;
  const int64_t tile = (w.si.token0 * gq) / T::kBlockM + w.batch + w.m_block;
  const int64_t gy = p.pack_gqa ? p.hkv : p.hq;
  const int64_t slot = (tile * gy + (p.pack_gqa ? w.hk : w.head)) * T::kConsumers + cs.c;
  if (slot >= P.split_slots) return;  // (the host sized the counters for every tile)
  __threadfence();  // this thread's partial rows, device-wide before the arrival
  const uint32_t bar = bar_id(Bar::epilogue0) + cs.c;
  ptx::named_barrier_sync(bar, 128);
  bool last = false;
  if (tid == 0) {
    last = atomicAdd(P.split_counter + slot, 1u) == static_cast<uint32_t>(p.num_splits - 1);
    if (last) atomicExch(P.split_counter + slot, 0u);
  }
  bool merge = ptx::named_barrier_sync_or(bar, 128, last);
  if constexpr (FA4_SM90_CALLED_MERGE) merge = ptx::uniform_from_lane0(merge);
  if (!merge) return;
  __threadfence();  // the other splits' rows, published before their arrivals
  merge_split_rows<typename T::OutElem, T::kDv>(p, w, row0, tid);
}

// An epilogue that staged nothing in shared memory (split partials, a balanced walk's piece that
// handed its state over) hands back what the staged path would release: the O staging space over
// the V ring, or the Q tile.
template <class T>
__device__ __forceinline__ void hand_back(Consumer<T>& cs) {
  if (T::kOInV) {
    // (one arrival per consumer thread, fwd_kernel.cuh; the barrier before it only keeps
    // ptxas' allocation of the split_kv D 256 instance: without it 152 / 284 bytes spilled, with it 16 / 36)
    ptx::named_barrier_sync(bar_id(Bar::epilogue0) + cs.c, 128);
    ptx::mbarrier_arrive(&cs.sh.o_empty);
  } else if (!T::kSeparateO) {
    cs.release_q();
  }
}

// (Balanced walk, common/tile_schedule.h) The end of a piece of a remainder tile cut into k
// pieces (w.split = -1 - piece code: TileSchedule::piece's cut, 2 x the remainder tile + the
// CTA's remainder step, which names the piece's state slot). Each
// piece stores its consumer threads' (O, m, l) -- the accumulator registers as they are, m and l
// per row half -- then arrives on the (tile, consumer) counter; the last of the k to arrive
// reads all k states in CTA order and merges them: m = max, O = sum O_j 2^((m_j - m) sc), l
// likewise (per thread: the quad's sum of l comes in the epilogue). In that fixed order, the
// bits do not depend on which piece merged. True: this consumer holds the tile's merged state and
// runs the epilogue; false: another piece will (the last zeroes the counter for the next launch).
// Nobody waits on another CTA, so no CTA order is assumed.
template <class T>
__device__ __forceinline__ bool merge_piece(const Sm90Params& P, Consumer<T>& cs) {
  constexpr int kORegs = Consumer<T>::kORegs, kRegs = kORegs + 4;
  const TileWork& w = cs.w;
  const uint32_t code = static_cast<uint32_t>(-1 - w.split), tile = code / 2, ctas = gridDim.x;
  const uint32_t slot = 2 * blockIdx.x + code % 2;
  auto state = [&](uint32_t sl) { return P.piece_state + (static_cast<int64_t>(sl) * T::kConsumers + cs.c) * (kRegs * 128) + cs.tid; };
  float* mine = state(slot);
#pragma unroll
  for (int i = 0; i < kORegs; ++i) __stcg(mine + i * 128, cs.o[i]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    __stcg(mine + (kORegs + h) * 128, cs.m_run[h]);
    __stcg(mine + (kORegs + 2 + h) * 128, cs.l_run[h]);
  }
  uint32_t first, count;
  P.sched.pieces_of(tile, ctas, &first, &count);
  __threadfence();  // this thread's state, device-wide before the arrival
  const uint32_t bar = bar_id(Bar::epilogue0) + cs.c;
  ptx::named_barrier_sync(bar, 128);
  bool last = false;
  if (cs.tid == 0) {
    uint32_t* ctr = P.piece_counter + static_cast<int64_t>(tile) * T::kConsumers + cs.c;
    last = atomicAdd(ctr, 1u) == count - 1;
    if (last) atomicExch(ctr, 0u);
  }
  if (!ptx::uniform_from_lane0(ptx::named_barrier_sync_or(bar, 128, last))) return false;
  __threadfence();  // the other pieces' states, published before their arrivals
  const uint32_t n = static_cast<uint32_t>(P.sched.balanced_n), x0 = tile * n;
  auto slot_of = [&](uint32_t i) {  // CTA first + i's piece of the tile
    const uint32_t c = first + i;
    return 2 * c + (P.sched.share_begin(c, ctas) < x0 ? 1u : 0u);
  };
  float m[2] = {-INFINITY, -INFINITY};
  for (uint32_t i = 0; i < count; ++i) {
    const float* st = state(slot_of(i));
#pragma unroll
    for (int h = 0; h < 2; ++h) m[h] = fmaxf(m[h], __ldcg(st + (kORegs + h) * 128));
  }
#pragma unroll
  for (int i = 0; i < kORegs; ++i) cs.o[i] = 0.f;
  cs.l_run[0] = cs.l_run[1] = 0.f;
  for (uint32_t j = 0; j < count; ++j) {
    const float* st = state(slot_of(j));
    float a[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float mj = __ldcg(st + (kORegs + h) * 128);
      // (a row no key of this piece reached: its O and l are 0)
      a[h] = mj == -INFINITY ? 0.f : ptx::exp2_approx((mj - m[h]) * cs.sc);
      cs.l_run[h] += __ldcg(st + (kORegs + 2 + h) * 128) * a[h];
    }
    // (16 loads in flight at a time: all of them hoisted at once would hold kORegs registers more)
#pragma unroll
    for (int i = 0; i < kORegs; ++i) {
      if (i % 16 == 0) asm volatile("" ::: "memory");
      cs.o[i] += __ldcg(st + i * 128) * a[(i >> 1) & 1];
    }
  }
  cs.m_run[0] = m[0], cs.m_run[1] = m[1];
  return true;
}

template <class T>
__device__ __forceinline__ void epilogue(const Sm90Params& P, Consumer<T>& cs) {
  using Elem = typename T::OutElem;  // (e4m3 inputs: bf16)
  constexpr int kDv = T::kDv;
  const FwdArgs& p = cs.p;
  const TileWork& w = cs.w;
  const int c = cs.c, tid = cs.tid;
  const int row0 = w.m0 + c * kRowsPerConsumer;  // tile row of this consumer's row 0
  // Split-KV: this split's normalized O and lse go to the fp32 partials (o_part / lse_part, one
  // row per (split, token, head)), merged by cuda/combine; the sinks join once, in split 0.
  const bool partials = p.num_splits > 1;
  // (split < 0: a balanced walk's piece, fwd_kernel.cuh -- the tile's one epilogue)
  const bool sinks = p.sinks != nullptr && (w.split == 0 || (T::kBalanced && w.split < 0));
  const float sink_head = sinks ? p.sinks[w.head * p.sinks_st] * kLog2e : -INFINITY;
  // (e4m3 v: the fp8 tiles, fp8_kv) v_descale of the tile's (batch, kv head): O = (P V_e4m3) x v_descale.
  [[maybe_unused]] float v_descale = 1.f;
  if constexpr (T::kDescale) {
    if (P.v_descale != nullptr) v_descale = P.v_descale[w.batch * P.vd_s0 + w.hk * P.vd_sh];
  }

  float scale[2];
  int64_t prow[2];  // (partials) the partial row of this thread's row half h
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // Tile row m -> (query row i, head): PackGQA tile rows interleave the group's heads.
    const int m = row0 + cs.row_of(h);
    int i = m, head = w.head;
    float sink2 = sink_head;
    if (p.pack_gqa) {
      i = m / p.group;
      head += m - i * p.group;
      if (sinks) sink2 = p.sinks[head * p.sinks_st] * kLog2e;
    }
    const float l = quad_sum(cs.l_run[h]);
    float m2 = cs.m_run[h] == -INFINITY ? -INFINITY : cs.m_run[h] * cs.sc;
    // (e4m3: l and O hold 2^kFp8PShift P; as a max it cancels in O / l and leaves the lse right)
    if constexpr (T::kFp8) m2 -= Consumer<T>::kFp8PShift;
    const RowFinal f = finalize_row(m2, l, sink2);
    scale[h] = f.scale;
    if constexpr (T::kDescale) scale[h] *= v_descale;
    prow[h] = (static_cast<int64_t>(w.split) * p.rows_total + w.si.token0 + i) * p.hq + head;
    if (cs.t4 == 0 && m < w.rows_seq) {
      if (partials) {
        p.lse_part[prow[h]] = f.lse;
      } else if (p.lse != nullptr) {
        // (SeqInfo::lse_row's offset, spelled out: with the call, ptxas allocated the standard
        // instances' registers differently -- 3076 SASS lines moved --, not yet run on a GPU.)
        const int64_t lo = p.varlen_q ? (w.si.token0 + i) * p.lse_si : w.batch * p.lse_sb + i * p.lse_si;
        p.lse[lo + head * p.lse_sh] = f.lse;
      }
    }
  }

  if (partials) {
    // Straight from the accumulator fragments (element pair (i, i + 1) is row row_of(h), columns
    // 8 cb + 2 t4 .. + 1): a quad writes 32 contiguous bytes per column block, whole sectors.
    // Every kDv column: the partials' row stride is the kernel's Dv (plan dv).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (row0 + cs.row_of(h) >= w.rows_seq) continue;
      float* dst = p.o_part + prow[h] * p.dv_pad + 2 * cs.t4;
#pragma unroll
      for (int cb = 0; cb < kDv / 8; ++cb)
        *reinterpret_cast<float2*>(dst + 8 * cb) = make_float2(cs.o[4 * cb + 2 * h] * scale[h], cs.o[4 * cb + 2 * h + 1] * scale[h]);
    }
    if (T::kFusedMerge && P.split_counter != nullptr && row0 < w.rows_seq) merge_splits_if_last<T>(P, cs, row0);
    hand_back<T>(cs);
    return;
  }

  // Stage: element pair (i, i + 1) of O is (row_of(h), 8 cb + 2 t4 .. + 1), h = (i / 2) % 2.
  // The warpgroup's reads of the previous tile's staged O are done before it is overwritten.
  uint8_t* stage = cs.sh.o_stage(c);
  const uint32_t bar = bar_id(Bar::epilogue0) + c;
  // A TMA store of the previous tile may still be reading the staging tile (thread 0 issued it).
  if (T::kTmaStore && tid == 0 && P.tma_store) ptx::bulk_wait_group_read<0>();
  if (T::kSeparateO) ptx::named_barrier_sync(bar, 128);
  // Staged over the V ring: every consumer's last P V has read it (each waited for its own).
  // The ring holds no later V: the producer waits for o_empty first.
  if (T::kOInV) ptx::named_barrier_sync(bar_id(Bar::consumers), cs.consumer_threads());
  constexpr int kChunkBytes = kRowsPerConsumer * 128;
#pragma unroll
  for (int i = 0; i < Consumer<T>::kORegs; i += 2) {
    const int h = (i >> 1) & 1;
    const int col = 8 * (i >> 2) + 2 * cs.t4;
    const uint32_t off = (col / 64) * kChunkBytes + ptx::swizzle128_offset(cs.row_of(h), (col % 64) * 2);
    *reinterpret_cast<uint32_t*>(stage + off) = ptx::pack2<Elem>(cs.o[i] * scale[h], cs.o[i + 1] * scale[h]);
  }
  // TMA (dense: rows past the sequence are past the map's extent and not written; varlen: only
  // whole 64-row tiles, the next sequence's rows follow in the same map; never with PackGQA, whose
  // rows are not one head's: make_params) or 16-byte stores.
  const bool tma = T::kTmaStore && P.tma_store && (!p.varlen_q || row0 + kRowsPerConsumer <= w.rows_seq);
  if (tma) ptx::fence_proxy_async_shared_cta();  // the staged writes -> the TMA unit's reads
  ptx::named_barrier_sync(bar, 128);
  if (tma) {
    if (tid == 0) {
      const int o_row = p.varlen_q ? static_cast<int>(w.si.token0) + row0 : row0;
      const int o_b = p.varlen_q ? 0 : w.batch;
#pragma unroll
      for (int ch = 0; ch < kDv / 64; ++ch) ptx::tma_store_4d(&P.tm_o, stage + ch * kChunkBytes, ch * 64, w.head, o_row, o_b);
      ptx::bulk_commit_group();
    }
    return;  // (kTmaStore: O has its own staging tile; Q was released after the last S)
  }

  constexpr int kPieces = kDv / 8;  // 16-byte pieces of a row
  Elem* const out = static_cast<Elem*>(p.out) + w.si.o_base + static_cast<int64_t>(w.head) * p.o_sh;
#pragma unroll 1
  for (int idx = tid; idx < kRowsPerConsumer * kPieces; idx += 128) {
    const int r = idx / kPieces, pc = idx % kPieces;
    if (row0 + r >= w.rows_seq) break;  // rows ascend with idx
    const uint8_t* piece = stage + (pc / 8) * kChunkBytes + ptx::swizzle128_offset(r, (pc % 8) * 16);
    Elem* dst;
    if (p.pack_gqa) {
      const int i = (row0 + r) / p.group;
      dst = out + static_cast<int64_t>(i) * w.si.o_step + static_cast<int64_t>(row0 + r - i * p.group) * p.o_sh + pc * 8;
    } else {
      dst = out + static_cast<int64_t>(row0 + r) * w.si.o_step + pc * 8;
    }
    const int valid = p.dv - pc * 8;
    if (valid >= 8) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(piece);
    } else if (valid > 0) {
      // The tail piece of a padded head dim (Dv % 8 != 0), element by element from shared
      // memory. (Indexing a uint4 held in registers by a runtime element put it on the stack, and
      // ptxas hoisted that STL.128 above the full-piece branch: every piece of every row paid a
      // local-memory store, 2 % of the stall samples at D 128 S 1k causal; fixed-index forms of
      // the tail spilled the D 64 kernel, which runs at 128 registers.)
      const Elem* src = reinterpret_cast<const Elem*>(piece);
      for (int x = 0; x < valid; ++x) dst[x] = src[x];
    }
  }
  // O staged in Q / over the V ring: its generic-proxy reads are done before the next tile's TMA
  // (async proxy) overwrites it. Over the V ring every thread arrives on o_empty after its own
  // reads (as on q_empty): with the warpgroup's reads collected by a named barrier and one
  // arrival, racecheck reported them against the next tile's V-tail zeroing by the other
  // consumer -- the order passed through the producer's wait and the TMA that refilled the slot.
  if (T::kOInV) {
    ptx::fence_proxy_async_shared_cta();
    ptx::mbarrier_arrive(&cs.sh.o_empty);
  } else if (!T::kSeparateO) {
    ptx::fence_proxy_async_shared_cta();
    cs.release_q();
  }
}

}  // namespace fa4::cuda::sm90
