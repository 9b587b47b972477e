// The load role of the sm90 forward kernel: one elected thread of the producer warp issues every
// TMA copy of the CTA -- Q once (every consumer's 64 rows on one barrier), then per key
// tile K into the K ring and V into the V ring (separate rings, so S = Q K^T of tile t + 1 can
// start while V of tile t is still in flight).
#pragma once

#include "cuda/common/pipeline.cuh"
#include "cuda/ptx/sm90_ptx.cuh"
#include "cuda/sm90/fwd_params.h"
#include "cuda/sm90/fwd_work.cuh"

namespace fa4::cuda::sm90 {

template <class T>
__device__ __forceinline__ void produce(const Sm90Params& P, typename T::Smem& sh, const TileWork& w) {
  constexpr int kBlockN = T::kBlockN;
  constexpr int kQBytes = T::kBlockM * T::kDqk * 2;
  constexpr int kKBytes = kBlockN * T::kDqk * 2;
  constexpr int kVBytes = kBlockN * T::kDv * 2;
  const int n = w.n_tiles();
  if (n <= 0) return;  // consumers skip the main loop too (empty rows)
  ptx::tma_prefetch_descriptor(&P.tm_q);
  ptx::tma_prefetch_descriptor(&P.tm_k);
  ptx::tma_prefetch_descriptor(&P.tm_v);

  ptx::mbarrier_arrive_expect_tx(&sh.q_full, kQBytes);
#pragma unroll
  for (int c = 0; c < T::kConsumers; ++c)
#pragma unroll
    for (int ch = 0; ch < T::kDqk / 64; ++ch)
      ptx::tma_load_4d(sh.q[c][ch], &P.tm_q, &sh.q_full, ch * 64, w.head, w.q_row0 + w.m0 + c * kRowsPerConsumer, w.q_b);

  PipelineState<T::kStages> st;
  for (int it = 0; it < n; ++it, st.advance()) {
    const int row = w.kv_row0 + w.tile_at(it) * kBlockN;
    uint64_t* kb = sh.k_ring.acquire(st, kKBytes);
#pragma unroll
    for (int ch = 0; ch < T::kDqk / 64; ++ch) ptx::tma_load_4d(sh.k[st.index][ch], &P.tm_k, kb, ch * 64, w.hk, row, w.kv_b);
    uint64_t* vb = sh.v_ring.acquire(st, kVBytes);
#pragma unroll
    for (int ch = 0; ch < T::kDv / 64; ++ch) ptx::tma_load_4d(sh.v[st.index][ch], &P.tm_v, vb, ch * 64, w.hk, row, w.kv_b);
  }
}

}  // namespace fa4::cuda::sm90
