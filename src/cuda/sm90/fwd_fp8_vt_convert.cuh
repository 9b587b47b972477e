// Device side of the fp8 tile's in-kernel V^T transpose (FA4_SM90_FP8_VT_IN_KERNEL, fwd_config.h;
// the map and why: fp8_vt_transpose.h). The producer warp's TMA brings each key tile's V rows into
// V byte slot s (fwd_producer.cuh) after writing the slot's row count; producer warps 1-3 -- the
// converters -- wait for the slot, wait for V^T slot s to be released by the consumers, transpose
// (zeros for keys at or past the row count), publish V^T slot s (fence.proxy.async: generic stores
// read by wgmma through the async proxy; one arrival per converter thread on its full barrier)
// and release the byte slot. They follow no tile walk: the slots come in ring order, and the
// producer ends them with a row count of Smem::kVtEnd past its last tile.
#pragma once

#include <cstdint>

#include "cuda/common/pipeline.cuh"
#include "cuda/ptx/sm90_ptx.cuh"
#include "cuda/sm90/fp8_vt_transpose.h"
#include "cuda/sm90/fwd_fp8_kv.h"

namespace fa4::cuda::sm90 {

// The rings' barriers (one thread, before the CTA barrier that publishes them): K as the TMA
// tiles' (the TMA's bytes; one release per consumer warpgroup); V^T full: one arrival per converter
// thread; the V byte ring: the producer's arrival + the TMA's bytes, empty: one arrival per
// converter thread.
template <class T>
__device__ __forceinline__ void init_vt_rings(typename T::Smem& sh, uint32_t consumers) {
  sh.k_ring.init(consumers, 1);
  sh.v_ring.init(consumers, kConvertThreads);
  sh.vtb.bars.init(kConvertThreads, 1);
}

template <class T>
struct VtConverter {
  using Map = VtTransposeMap<T::kBlockN, T::kDv>;
  using Smem = typename T::Smem;
  static constexpr int kStages = T::kStages;

  // Converter thread ct (0 .. kConvertThreads - 1: producer warps 1-3). Warp w takes units w, w + 3,
  // ... of every slot; a lane's addresses are its constants (fp8_vt_transpose.h) plus the unit's
  // (h << 11, j << 5) / (j << 12, h << 4) terms.
  static __device__ __forceinline__ void run(Smem& sh, int ct) {
    const int warp = ct / 32, lane = ct % 32;
    const uint32_t src_x = Map::src_xor(lane), dst_x = Map::dst_xor(lane);
    const uint32_t s0 = Map::sel0(lane), s1 = Map::sel1(lane);
    const uint32_t src0 = ptx::smem_u32(sh.vb(0)) + Map::src_base(lane);
    const uint32_t dst0 = ptx::smem_u32(sh.v[0][0]) + Map::dst_base(lane);
    constexpr uint32_t kByteSlot = T::kBlockN * T::kDv;                 // bytes of a V byte slot
    constexpr uint32_t kVtSlot = sizeof(Smem::v[0]);                    // and of a V^T slot
    PipelineState<kStages> st;
    for (;;) {
      sh.vtb.bars.wait(st);  // the V rows landed, or the walk ended
      const int rows = *reinterpret_cast<volatile const int32_t*>(&sh.vtb.rows[st.index]);
      if (rows == Smem::kVtEnd) break;
      ptx::mbarrier_wait_parity(&sh.v_ring.empty[st.index], st.phase ^ 1u);  // the consumers' P V read it
      const uint32_t src = src0 + st.index * kByteSlot, dst = dst0 + st.index * kVtSlot;
      if (rows >= T::kBlockN) slot<false>(src, dst, src_x, dst_x, s0, s1, warp, lane, rows);
      else slot<true>(src, dst, src_x, dst_x, s0, s1, warp, lane, rows);
      // The stores are read by wgmma (async proxy) once the consumers see the phase; the fence
      // also orders this thread's reads of the byte slot before the TMA's next write into it.
      ptx::fence_proxy_async_shared_cta();
      ptx::mbarrier_arrive(&sh.v_ring.full[st.index]);
      ptx::mbarrier_arrive(&sh.vtb.bars.empty[st.index]);
      st.advance();
    }
  }

  // One slot's units of this warp, two at a time (both ldmatrix issued before the first prmt: the
  // asm statements keep their order, so the pair is what overlaps the shared-memory latency). A
  // rolled loop: unrolled, ptxas hoisted every unit's offsets and masks out of the slot loop and
  // spilled them (240 bytes at 56 registers); here a unit's offsets are ~8 integer instructions.
  template <bool kPartial>
  static __device__ __forceinline__ void slot(uint32_t src, uint32_t dst, uint32_t src_x, uint32_t dst_x, uint32_t s0,
                                              uint32_t s1, int warp, int lane, int rows) {
#pragma unroll 1
    for (int u0 = warp; u0 < Map::kUnits; u0 += 2 * kConvertWarps) {  // (warp-uniform)
      const int u1 = u0 + kConvertWarps;
      const bool has1 = u1 < Map::kUnits;
      uint32_t r0[4], r1[4];
      load(src, src_x, u0, r0);
      if (has1) load(src, src_x, u1, r1);
      store<kPartial>(dst, dst_x, s0, s1, u0, r0, lane, rows);
      if (has1) store<kPartial>(dst, dst_x, s0, s1, u1, r1, lane, rows);
    }
  }
  static __device__ __forceinline__ void load(uint32_t src, uint32_t src_x, int u, uint32_t (&r)[4]) {
    const uint32_t h = static_cast<uint32_t>(Map::unit_h(u)), j = static_cast<uint32_t>(Map::unit_j(u));
    ptx::ldsm_x4_trans(src + (h << 11) + ((j << 5) ^ src_x), r);
  }
  template <bool kPartial>
  static __device__ __forceinline__ void store(uint32_t dst, uint32_t dst_x, uint32_t s0, uint32_t s1, int u,
                                               uint32_t (&r)[4], int lane, int rows) {
    const uint32_t h = static_cast<uint32_t>(Map::unit_h(u)), j = static_cast<uint32_t>(Map::unit_j(u));
    if constexpr (kPartial) {  // keys at or past `rows`: zeros (matrices 0 / 2: the unit's first 8 keys)
      const uint32_t lo = Map::key_mask(Map::first_key(lane, static_cast<int>(h), 0), rows);
      const uint32_t hi = Map::key_mask(Map::first_key(lane, static_cast<int>(h), 1), rows);
      r[0] &= lo, r[2] &= lo, r[1] &= hi, r[3] &= hi;
    }
    const uint32_t o[4] = {__byte_perm(r[0], r[1], s0), __byte_perm(r[0], r[1], s1), __byte_perm(r[2], r[3], s0),
                           __byte_perm(r[2], r[3], s1)};
    ptx::stsm_x4(dst + (j << 12) + ((h << 4) ^ dst_x), o);
  }
};

}  // namespace fa4::cuda::sm90
