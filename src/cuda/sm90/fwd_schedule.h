// Warp roles, register budgets and named-barrier ids of the sm90 forward kernel.
#pragma once

#include <cstdint>

#include "cuda/sm90/fwd_config.h"
#include "cuda/sm90/fwd_fp8_kv.h"

namespace fa4::cuda::sm90 {

// Warpgroup w of the CTA (threads 128w .. 128w + 127).
enum class Role : int {
  producer = 0,   // warp 0 issues every TMA load (Q once, K/V per key tile); warps 1-3 exit, or
                  // load K / V (gather instances), or widen the e4m3 K / V (Tile::fp8_kv), or
                  // transpose the e4m3 V (FA4_SM90_FP8_VT_IN_KERNEL)
  consumer0 = 1,  // query rows 0..63 of the tile: S = Q K^T, softmax, O += P V, epilogue
  consumer1 = 2,  // query rows 64..127
  consumer2 = 3,  // query rows 128..191 (three-consumer configurations, fwd_config.h)
};
__device__ __forceinline__ Role role_of(int thread) { return static_cast<Role>(thread / 128); }
// Consumer index 0 .. consumers - 1 of a consumer thread.
__device__ __forceinline__ int consumer_of(int thread) { return thread / 128 - 1; }

// setmaxnreg budgets at one CTA per SM (65536 registers; the producer gives its share away):
// two consumers 24 * 128 + 2 * 240 * 128 = 64512, three 32 * 128 + 3 * 160 * 128 = 65536;
// Tile::fp8_kv and the two-consumer e4m3 tile that transposes V itself (vt_convert:
// FA4_SM90_FP8_VT_IN_KERNEL; converter warps in the producer warpgroup: fwd_fp8_kv.h,
// fwd_fp8_vt_convert.cuh) 56 * 128 + 2 * 224 * 128 = 64512. The three-consumer one (D 64) keeps
// 32 / 160, so its consumers compile as the pre-pass tile's: its converters (two dim groups a key
// group) spill 16 bytes of slot setup there, 4 L1-resident loads a slot; at 56 / 152 they spilled
// nothing and the consumers' key loop took 4 instructions more (922 -> 926).
constexpr int producer_regs(int consumers, Tile t = Tile::standard, bool vt_convert = false) {
  return t == Tile::fp8_kv || (vt_convert && consumers == 2) ? kFp8KvProducerRegs : consumers == 2 ? 24 : 32;
}
constexpr int consumer_regs(int consumers, Tile t = Tile::standard, bool vt_convert = false) {
  if (t == Tile::fp8_kv || (vt_convert && consumers == 2)) return kFp8KvConsumerRegs;
  return consumers == 2 ? 240 : 160;
}
static_assert(128 * kFp8KvProducerRegs + 2 * 128 * kFp8KvConsumerRegs <= 384 * 168,
              "setmaxnreg moves registers within the launch's 384 x 168 (two-consumer CTAs)");

// Named barriers (16 per CTA; 0 is __syncthreads'). Per-consumer barriers are consecutive ids:
// bar_id(Bar::turn0) + c.
enum class Bar : uint32_t {
  cta = 0,
  consumers = 1,   // all consumer warpgroups: the one-time V tail zeroing
  turn0 = 2,       // consumer c may issue its GEMMs: turn0 + c (ping-pong in a ring over the
                   // consumers; 256 threads: 128 wait + 128 arrive)
  epilogue0 = turn0 + kMaxConsumers,  // consumer c's 128 threads: O staged in shared memory
  q_convert0 = epilogue0 + kMaxConsumers,  // (F16ComputeTraits) consumer c's 128 threads: its Q
                                           // tile converted to fp16 in place (fwd_consumer.cuh)
  pair = q_convert0 + kMaxConsumers,  // (1Q tiles, bf16 q computed in fp16) both consumers, 256
                                      // threads: Q converted, its row factors in Smem::pair_ml
  end,
};
static_assert(static_cast<uint32_t>(Bar::end) <= 16, "16 named barriers per CTA");
__device__ __forceinline__ uint32_t bar_id(Bar b) { return static_cast<uint32_t>(b); }

}  // namespace fa4::cuda::sm90
