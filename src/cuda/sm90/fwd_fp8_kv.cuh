// Device side of the sm90 kernel's fp8-KV tile (Tile::fp8_kv, fwd_fp8_kv.h): the ring barriers'
// counts and the converter role of producer warps 1-3 (and, FA4_SM90_FP8_KV_WIDE_CONVERT in solo
// launches, of consumer warpgroup 1). The TMA loads of the byte rings are fwd_producer.cuh's
// (warp 0); the consumers and the epilogue are the 16-bit tile's.
#pragma once

#include <cstdint>

#include "cuda/common/e4m3_widen.cuh"
#include "cuda/common/pipeline.cuh"
#include "cuda/ptx/sm90_ptx.cuh"
#include "cuda/sm90/fwd_fp8_kv.h"
#include "cuda/sm90/fwd_params.h"
#include "cuda/sm90/fwd_work.cuh"

namespace fa4::cuda::sm90 {

// The rings' barriers (one thread, before the CTA barrier that publishes them): a byte slot's
// full barrier takes the producer's one arrival + the TMA's bytes, its empty barrier one arrival
// per converter thread; a 16-bit slot's full barrier one arrival per converter thread (each after
// its own stores and proxy fence), its empty barrier one release per consumer warpgroup as before.
// `converters`: the launch's converter threads (fp8_kv_convert_threads): each arrives once on
// both barriers of every slot of the walk, whatever its share of the slot's units
// (KvConverter::slot).
template <class T>
__device__ __forceinline__ void init_fp8_kv_rings(typename T::Smem& sh, uint32_t consumers, uint32_t converters) {
  sh.k_ring.init(consumers, converters);
  sh.v_ring.init(consumers, converters);
  sh.kvb_bars.k.init(converters);
  sh.kvb_bars.v.init(converters);
}

template <class T>
struct KvConverter {
  using Elem = typename T::Elem;
  template <int kThreads>
  using Map = ConvertMap<T::kBlockN, T::kDqk, kThreads>;
  static_assert(T::kDqk == T::kDv, "one map for K and V slots");
  static constexpr int kByteStages = T::Smem::kTmaStages;
  static constexpr int kBatch = FA4_SM90_FP8_KV_BATCH;

  // Byte slot `sb` widened into 16-bit slot `s16` of one ring pair (K or V): wait for the bytes
  // and for the 16-bit slot to be free, widen this thread's units, publish, release the bytes.
  // Rows at or past `rows` (the sequence's end in this key tile) are stored as zeros: in a cache
  // the TMA brought whatever follows the sequence there (another sequence's rows, unused slots),
  // and 0 x NaN garbage in V would reach O; zeroed here, the consumers need not zero them again
  // (fwd_consumer.cuh kZeroFilled). (K rows there are masked by the consumers.) Thread ct of
  // kThreads converters takes its units of Map<kThreads>.
  template <int kThreads>
  static __device__ __forceinline__ void slot(MbarRing<kByteStages>& bring, const PipelineState<kByteStages>& sb,
                                              const uint8_t* bytes, MbarRing<T::kStages>& ring,
                                              const PipelineState<T::kStages>& s16, uint8_t* out, int ct,
                                              int rows = T::kBlockN) {
    bring.wait(sb);
    ptx::mbarrier_wait_parity(&ring.empty[s16.index], s16.phase ^ 1u);
    // kBatch units at a time, their loads first: the compiler cannot move a load of the byte slot
    // above a store into the 16-bit slot (both shared memory), so without the batch each unit's
    // load waited for the previous unit's stores.
    using M = Map<kThreads>;
    const uint32_t rl = static_cast<uint32_t>(ct) % 8u, g0 = static_cast<uint32_t>(ct) / 8u;
#pragma unroll 1
    for (int i0 = 0; i0 < M::kSteps; i0 += kBatch) {
      uint4 x[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const uint32_t g = g0 + (i0 + j) * M::kGroupStep;
        if (g < M::kGroups) x[j] = *reinterpret_cast<const uint4*>(bytes + M::src(g, rl));
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const uint32_t g = g0 + (i0 + j) * M::kGroupStep;
        if (g >= M::kGroups) break;
        uint4 a, b;
        if (static_cast<int>(M::row_of(g, rl)) >= rows) x[j] = make_uint4(0u, 0u, 0u, 0u);  // (e4m3 0 -> +0)
        widen_e4m3x4<Elem>(x[j].x, a.x, a.y);
        widen_e4m3x4<Elem>(x[j].y, a.z, a.w);
        widen_e4m3x4<Elem>(x[j].z, b.x, b.y);
        widen_e4m3x4<Elem>(x[j].w, b.z, b.w);
        *reinterpret_cast<uint4*>(out + M::dst(g, rl, 0)) = a;
        *reinterpret_cast<uint4*>(out + M::dst(g, rl, 1)) = b;
      }
    }
    // The stores are read by wgmma (async proxy) once the consumers see the phase; the fence also
    // orders this thread's reads of the byte slot before the TMA's next write into it.
    ptx::fence_proxy_async_shared_cta();
    ptx::mbarrier_arrive(&ring.full[s16.index]);
    ptx::mbarrier_arrive(&bring.empty[sb.index]);
  }

  // The converters' walk: the producer warp's static walk (fwd_producer.cuh; T::kDynamicWalk is
  // false), K then V of every key tile of every tile, both ring pairs advancing together -- the
  // same in every converter thread, whichever warpgroup it is in. ct: the converter thread,
  // 0 .. kThreads - 1.
  template <int kThreads>
  static __device__ __forceinline__ void walk(const Sm90Params& P, typename T::Smem& sh, int ct) {
    PipelineState<kByteStages> sb;
    PipelineState<T::kStages> s16;
    int64_t r = 0, t = P.sched.tile_for(0, blockIdx.x, gridDim.x);
    for (;;) {
      TileWork w;
      if (t >= 0 && w.template init<false>(P.a, P.sched, t, T::kBlockM, T::kBlockN)) {
        const int n = w.n_tiles();
#pragma unroll 1
        for (int it = 0; it < n; ++it) {
          slot<kThreads>(sh.kvb_bars.k, sb, sh.kb(sb.index), sh.k_ring, s16,
                         reinterpret_cast<uint8_t*>(sh.k[s16.index][0]), ct);
          slot<kThreads>(sh.kvb_bars.v, sb, sh.vb(sb.index), sh.v_ring, s16,
                         reinterpret_cast<uint8_t*>(sh.v[s16.index][0]), ct, w.sk - w.tile_at(it) * T::kBlockN);
          sb.advance();
          s16.advance();
        }
      }
      if (++r >= P.sched.rounds(gridDim.x)) break;
      t = P.sched.tile_for(r, blockIdx.x, gridDim.x);
    }
  }

  // Converter thread ct of the launch (producer warps 1-3: 0 .. 95; FA4_SM90_FP8_KV_WIDE_CONVERT
  // in solo launches, consumer warpgroup 1: 96 .. 223): the walk over the map of the launch's
  // converter count (fp8_kv_convert_threads, the count init_fp8_kv_rings gave the barriers). Each
  // count its own instantiation: the map's steps stay compile-time constants.
  static __device__ __forceinline__ void run(const Sm90Params& P, typename T::Smem& sh, int ct, bool solo) {
    if constexpr (FA4_SM90_FP8_KV_WIDE_CONVERT) {
      if (fp8_kv_convert_threads(solo) == kWideConvertThreads) return walk<kWideConvertThreads>(P, sh, ct);
    } else {
      (void)solo;
    }
    walk<kConvertThreads>(P, sh, ct);
  }
};

}  // namespace fa4::cuda::sm90
