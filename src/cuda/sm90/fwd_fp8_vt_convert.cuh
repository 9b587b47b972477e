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

  // Converter thread ct (0 .. kConvertThreads - 1: producer warps 1-3). Warp w takes the key
  // groups h = w, w + 3, ... of every slot, each with its kDimGroups units (fp8_vt_transpose.h): a
  // lane's source offset per unit is the key group's base plus (j << 5) ^ src_x, one LOP3 each (held
  // as per-lane registers instead, those constants spilled the D 64 converters at 32 registers);
  // its destination offsets are immediates past the key group's.
  static __device__ __forceinline__ void run(Smem& sh, int ct) {
    const int warp = ct / 32, lane = ct % 32;
    const uint32_t src_x = Map::src_xor(lane), dst_x = Map::dst_xor(lane);
    const uint32_t s0 = Map::sel0(lane);  // (sel1 = sel0 ^ 0x1111: the other of 0x6420 / 0x7531)
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
      if (rows >= T::kBlockN) slot<false>(src, dst, src_x, dst_x, s0, warp, lane, rows);
      else slot<true>(src, dst, src_x, dst_x, s0, warp, lane, rows);
      // The stores are read by wgmma (async proxy) once the consumers see the phase; the fence
      // also orders this thread's reads of the byte slot before the TMA's next write into it.
      ptx::fence_proxy_async_shared_cta();
      ptx::mbarrier_arrive(&sh.v_ring.full[st.index]);
      ptx::mbarrier_arrive(&sh.vtb.bars.empty[st.index]);
      st.advance();
    }
  }

  // This warp's key groups of one slot: per group its kDimGroups ldmatrix first (the asm statements
  // keep their order, so the group's loads are what overlaps the shared-memory latency), then the
  // prmt / stmatrix of each. A rolled loop over the groups (2 or 3 per warp): unrolled, ptxas
  // hoisted every unit's offsets out of the slot loop and spilled them at 56 registers.
  template <bool kPartial>
  static __device__ __forceinline__ void slot(uint32_t src, uint32_t dst, uint32_t src_x, uint32_t dst_x, uint32_t s0,
                                              int warp, int lane, int rows) {
#pragma unroll 1
    for (int h = warp; h < Map::kKeyGroups; h += kConvertWarps) {  // (warp-uniform)
      const uint32_t sh16 = src + static_cast<uint32_t>(h * Map::kKeyGroupBytes);
      uint32_t r[Map::kDimGroups][4];
#pragma unroll
      for (int j = 0; j < Map::kDimGroups; ++j) ptx::ldsm_x4_trans(sh16 + Map::src_piece_x(src_x, j), r[j]);
      if constexpr (kPartial) {  // keys at or past `rows`: zeros (matrices 0 / 2: the group's first 8 keys)
        const uint32_t lo = Map::key_mask(Map::first_key(lane, h, 0), rows);
        const uint32_t hi = Map::key_mask(Map::first_key(lane, h, 1), rows);
#pragma unroll
        for (int j = 0; j < Map::kDimGroups; ++j) r[j][0] &= lo, r[j][2] &= lo, r[j][1] &= hi, r[j][3] &= hi;
      }
      const uint32_t dh = dst + ((static_cast<uint32_t>(h) << 4) ^ dst_x);
      store<0>(dh, r, s0, s0 ^ 0x1111u);
    }
  }
  template <int J>
  static __device__ __forceinline__ void store(uint32_t dh, uint32_t (&r)[Map::kDimGroups][4], uint32_t s0, uint32_t s1) {
    if constexpr (J < Map::kDimGroups) {
      const uint32_t o[4] = {__byte_perm(r[J][0], r[J][1], s0), __byte_perm(r[J][0], r[J][1], s1),
                             __byte_perm(r[J][2], r[J][3], s0), __byte_perm(r[J][2], r[J][3], s1)};
      ptx::stsm_x4<(J << 12)>(dh, o);  // (dim group J: 32 V^T rows of 128 bytes further)
      store<J + 1>(dh, r, s0, s1);
    }
  }
};

}  // namespace fa4::cuda::sm90
