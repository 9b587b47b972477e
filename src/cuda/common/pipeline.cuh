// mbarrier ring state shared by producer and consumer roles (sm_90).
//
// A ring of kStages slots, each with a "full" barrier (producer -> consumers: arrive_expect_tx +
// TMA complete_tx) and an "empty" barrier (consumers -> producer: one elected arrival per
// consumer warpgroup). Both sides walk the slots in the same order and keep {index, phase}: the
// parity to wait on flips every time the index wraps. A fresh barrier is in phase 0, so the
// producer's first wait on an empty barrier uses parity 1 and passes at once.
#pragma once

#include <cstdint>

#include "cuda/ptx/sm90_ptx.cuh"

namespace fa4::cuda {

template <int kStages>
struct PipelineState {
  int index = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++index == kStages) index = 0, phase ^= 1u;
  }
  // k >= 0 advances at once.
  __device__ __forceinline__ void advance_by(int k) {
    const int i = index + k;
    phase ^= static_cast<uint32_t>(i / kStages) & 1u;
    index = i % kStages;
  }
};

template <int kStages>
struct MbarRing {
  uint64_t full[kStages];
  uint64_t empty[kStages];

  // One thread, before the CTA barrier that publishes the init. full_arrivals: 1 where one
  // thread announces a TMA's bytes (acquire), or the count of threads that fill a slot themselves
  // and each arrive (the sm90 gather and fp8-KV converter warps).
  __device__ __forceinline__ void init(uint32_t empty_arrivals, uint32_t full_arrivals = 1) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], full_arrivals);
      ptx::mbarrier_init(&empty[s], empty_arrivals);
    }
  }
  // Producer: wait until slot st is free, then the leader announces `bytes` of TMA into it (a
  // whole producer warp may wait; one thread must arrive).
  __device__ __forceinline__ uint64_t* acquire(const PipelineState<kStages>& st, uint32_t bytes, bool leader = true) {
    ptx::mbarrier_wait_parity(&empty[st.index], st.phase ^ 1u);
    if (leader) ptx::mbarrier_arrive_expect_tx(&full[st.index], bytes);
    return &full[st.index];
  }
  // Consumer: wait until slot st holds its tile.
  __device__ __forceinline__ void wait(const PipelineState<kStages>& st) {
    ptx::mbarrier_wait_parity(&full[st.index], st.phase);
  }
  // Consumer: the slot's reads are complete (after wgmma_wait_group); one thread per warpgroup.
  __device__ __forceinline__ void release(const PipelineState<kStages>& st, bool signaling_thread) {
    if (signaling_thread) ptx::mbarrier_arrive(&empty[st.index]);
  }
};

}  // namespace fa4::cuda
