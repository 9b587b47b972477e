// Device side of the sm90 kernel's gather instances (fwd_gather.h, FA4_SM90_PAGED_GATHER): the
// K / V loads of a paged cache by cp.async from the whole producer warpgroup, and the few places
// where such an instance differs from its TMA twin (the traits wrapper, the ring barriers' counts,
// the producer warps that run). The producer's walk, Q loads and hand-offs are fwd_producer.cuh's, run by
// all four producer warps (one elected lane of warp 0 issues the TMA and publishes the tiles);
// its two hooks call KvGather<T>::load in place of the TMA copies of a key tile.
#pragma once

#include <cstdint>

#include "cuda/common/pipeline.cuh"
#include "cuda/ptx/sm80_ptx.cuh"
#include "cuda/ptx/sm90_ptx.cuh"
#include "cuda/sm90/fwd_gather.h"
#include "cuda/sm90/fwd_params.h"
#include "cuda/sm90/fwd_work.cuh"

namespace fa4::cuda::sm90 {

template <class T>
struct KvGather;

// A TMA instance's traits (fwd_kernel.cuh FwdTraits) turned into its gather instance: the same
// tiles, shared storage and consumers; K / V by KvGather; the static walk only (the dynamic
// walk's claimed tile index is broadcast within warp 0 alone).
template <class Base>
struct GatherTraits : Base {
  using Gather = KvGather<GatherTraits>;
  static constexpr bool kDynamicWalk = false;
  static_assert(Base::kDqk == Base::kDv && has_gather_instance(Base::kDqk, Base::kDv, Base::kTile),
                "no gather instance of this tile (fwd_gather.h)");
};

template <class T>
constexpr bool gathers_kv() {
  return requires { typename T::Gather; };
}
// The K / V rings' barriers (one thread, before the CTA barrier that publishes them): a slot's
// full barrier takes one arrival (+ the TMA's bytes), or kGatherThreads cp.async arrivals.
template <class T>
__device__ __forceinline__ void init_kv_rings(typename T::Smem& sh, uint32_t consumers) {
  constexpr uint32_t kFullArrivals = gathers_kv<T>() ? kGatherThreads : 1;
  sh.k_ring.init(consumers, kFullArrivals);  // one release per consumer warpgroup
  sh.v_ring.init(consumers, kFullArrivals);
}

// cp.async.mbarrier.arrive.noinc: one arrival on `bar`, made when every cp.async this thread
// issued before it has landed; .noinc: the arrival is one of the phase's expected count (the ring
// barrier counts kGatherThreads of them), not an extra pending one.
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint64_t* bar) {
#if FA4_PTX_SM90
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(ptx::smem_u32(bar)) : "memory");
#else
  FA4_PTX_UNSUPPORTED();
#endif
}

// cp.async.wait_all: this thread's copies have landed (a producer thread's last act in a gather
// instance: none of them exits with copies in flight, as CUTLASS's producers wait out their
// pipelines before they exit).
__device__ __forceinline__ void cp_async_wait_all() {
#if FA4_PTX_SM90
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#else
  FA4_PTX_UNSUPPORTED();
#endif
}

template <class T>
struct KvGather {
  using Map = GatherMap<T::kBlockN>;
  static constexpr int kChunks = T::kDqk / 64;
  static constexpr uint32_t kChunkBytes = T::kBlockN * 128;  // fwd_smem.cuh: a [kBlockN][64] chunk
  static_assert(kGatherThreads == 128, "four producer warps");
  static_assert(sizeof(typename T::Elem) == 2 && T::kDqk == T::kDv, "16-bit rows of equal K / V dims");

  // K (k) or V of the key tile at key j0 of tile w into ring slot st: every producer thread waits
  // for the slot, copies its pieces (GatherMap, fwd_gather.h: the slot then holds what the TMA
  // boxes would have written) and arrives on the slot's full barrier (kGatherThreads arrivals
  // complete the phase, when every thread's copies have landed).
  //
  // Each lane reads its row's page-table entry before waiting for the slot, so the load's latency
  // hides under the wait; rows at or past the sequence's end read no entry (the table may end
  // there) and are zero-filled, as the TMA's out-of-bounds rows were: K rows there are masked by
  // the consumers; V rows need nothing more (the TMA instances' consumers zero theirs, whose
  // boxes may read another sequence's rows: fwd_consumer.cuh zero_v_tail).
  static __device__ __forceinline__ void load(const Sm90Params& P, typename T::Smem& sh,
                                              const PipelineState<T::kStages>& st, const TileWork& w, int j0, bool k) {
    const FwdArgs& a = P.a;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;  // (the producer warpgroup: threads 0-127)
    const int j = j0 + Map::entry_row(warp, lane);
    int32_t page = 0;
    int rip = 0;  // the row in its page
    if (j < w.sk) {
      const int ps = static_cast<int>(a.page_size);
      const int pi = j / ps;
      rip = j - pi * ps;
      page = __ldg(a.page_table + static_cast<int64_t>(w.batch) * a.pt_s0 + static_cast<int64_t>(pi) * a.pt_s1);
    }
    MbarRing<T::kStages>& ring = k ? sh.k_ring : sh.v_ring;
    ptx::mbarrier_wait_parity(&ring.empty[st.index], st.phase ^ 1u);
    // (The entry's first use, after the wait.) The row's byte offset in k / v; step i copies the
    // row lane src_lane(lane, i) holds.
    const int64_t off = gather_row_elems(page, rip, k ? a.k_s0 : a.v_s0, k ? a.k_s1 : a.v_s1, a.kv_rows0) * 2;
    const uint8_t* const base = static_cast<const uint8_t*>(k ? a.k : a.v) +
                                (static_cast<int64_t>(w.hk) * (k ? a.k_sh : a.v_sh) + (lane % 8) * 8) * 2;
    const uint32_t d0 = ptx::smem_u32(k ? sh.k[st.index][0] : sh.v[st.index][0]) + Map::dst0(warp, lane);
    const int left = w.sk - j0 - Map::copy_row(warp, 0, 0);  // this warp's rows below the sequence's end
#pragma unroll
    for (int i = 0; i < Map::kSteps; ++i) {
      const int r = Map::src_lane(lane, i);
      const uint8_t* const src = base + __shfl_sync(0xffffffffu, off, r);
      const uint32_t bytes = r < left ? 16u : 0u;  // 0: zero-filled, nothing read
      const uint32_t dst = Map::dst(d0, i);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) ptx::cp_async_16(dst + c * kChunkBytes, src + c * 128, bytes);
    }
    cp_async_mbarrier_arrive_noinc(&ring.full[st.index]);
  }
};

}  // namespace fa4::cuda::sm90
