// Warp roles, register budgets and named-barrier ids of the sm90 forward kernel.
#pragma once

#include <cstdint>

#include "cuda/sm90/fwd_config.h"

namespace fa4::cuda::sm90 {

// Warpgroup w of the CTA (threads 128w .. 128w + 127).
enum class Role : int {
  producer = 0,   // warp 0 issues every TMA load (Q once, K/V per key tile); warps 1-3 exit
  consumer0 = 1,  // query rows 0..63 of the tile: S = Q K^T, softmax, O += P V, epilogue
  consumer1 = 2,  // query rows 64..127
};
__device__ __forceinline__ Role role_of(int thread) { return static_cast<Role>(thread / 128); }

// setmaxnreg budgets: 24 * 128 + 2 * 240 * 128 = 64512 <= the SM's 65536 registers at one CTA
// per SM (the launch reserves 65536 / 384 = 168 per thread; the producer gives its share away).
constexpr int kProducerRegs = 24;
constexpr int kConsumerRegs = 240;

// Named barriers (16 per CTA; 0 is __syncthreads').
enum class Bar : uint32_t {
  cta = 0,
  consumers = 1,   // both consumer warpgroups (256 threads): the one-time V tail zeroing
  turn0 = 2,       // consumer 0 may issue its GEMMs (ping-pong; 256: 128 wait + 128 arrive)
  turn1 = 3,       // consumer 1 may issue its GEMMs
  epilogue0 = 4,   // consumer 0's 128 threads: O staged in shared memory
  epilogue1 = 5,
};
__device__ __forceinline__ uint32_t bar_id(Bar b) { return static_cast<uint32_t>(b); }

}  // namespace fa4::cuda::sm90
