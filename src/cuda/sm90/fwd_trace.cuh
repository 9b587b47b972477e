// Timeline instrumentation of the sm90 forward kernel, for FA4_SM90_TRACE=1 builds only (a
// variant library for bench/sm90_trace.py, never the shipped one: the stamps are global stores
// on the consumers' critical path). With it off every call below compiles to nothing.
//
// Why: the profile counters (ncu) say where stall samples land, not how a CTA's time splits
// between its tiles' prologue, mainloop and epilogue, or how long the last CTAs run alone --
// which is what decides the short causal shapes, where tiles are few and light.
//
// Layout (uint64, one record per CTA, kCtaStride words apart), written by one thread per role
// (lane 0 of the producer warp, thread 0 of each consumer warpgroup):
//   [0] %globaltimer at CTA start (ns)   [1] clock64 at CTA start   [2] SM id
//   [4 + r] clock64 at role r's exit     [8 + r] %globaltimer at role r's exit   (r < kMaxRoles)
//   [16 + (r * kMaxTiles + i) * kSlots + e]  event e of role r's i-th tile (clock64), e < kEvents;
//                                           slot kEvents: the tile's key-tile count
// Roles: 0 the producer, 1 + c consumer c. Consumer events: tile start (its TileWork ready), Q
// landed, mainloop done, epilogue done, walk start (loop top: before tile_for and TileWork::init),
// Consumer constructed. Producer events: tile start, Q issued, every K / V load issued, -,
// walk start, the wait for q_empty begins. (Clocks of one CTA are comparable across its roles.)
#pragma once

#include <cstdint>

#ifndef FA4_SM90_TRACE
#define FA4_SM90_TRACE 0
#endif

namespace fa4::cuda::sm90::trace {

constexpr int kMaxRoles = 4, kMaxTiles = 128, kEvents = 6, kSlots = kEvents + 1;
constexpr int kHeader = 16;
constexpr int kCtaStride = kHeader + kMaxRoles * kMaxTiles * kSlots;
enum Event : int {
  tile_start = 0, q_ready = 1, main_done = 2, epi_done = 3, walk_start = 4, cs_ready = 5,
  q_issued = q_ready, loads_issued = main_done, q_wait_start = cs_ready  // the producer's names
};

#if FA4_SM90_TRACE && defined(__CUDA_ARCH__)
__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint64_t* cta(uint64_t* base) { return base + static_cast<uint64_t>(blockIdx.x) * kCtaStride; }
__device__ __forceinline__ void cta_start(uint64_t* base) {
  if (base == nullptr) return;
  uint32_t smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  uint64_t* r = cta(base);
  r[0] = globaltimer(), r[1] = clock64(), r[2] = smid;
}
__device__ __forceinline__ void role_exit(uint64_t* base, int role) {
  if (base == nullptr) return;
  uint64_t* r = cta(base);
  r[4 + role] = clock64(), r[8 + role] = globaltimer();
}
__device__ __forceinline__ void stamp(uint64_t* base, int role, uint32_t tile, int ev) {
  if (base == nullptr || tile >= kMaxTiles) return;
  cta(base)[kHeader + (role * kMaxTiles + tile) * kSlots + ev] = clock64();
}
__device__ __forceinline__ void key_tiles(uint64_t* base, int role, uint32_t tile, int n) {
  if (base == nullptr || tile >= kMaxTiles) return;
  cta(base)[kHeader + (role * kMaxTiles + tile) * kSlots + kEvents] = static_cast<uint64_t>(n);
}
#else
__device__ __forceinline__ void cta_start(uint64_t*) {}
__device__ __forceinline__ void role_exit(uint64_t*, int) {}
__device__ __forceinline__ void stamp(uint64_t*, int, uint32_t, int) {}
__device__ __forceinline__ void key_tiles(uint64_t*, int, uint32_t, int) {}
#endif

}  // namespace fa4::cuda::sm90::trace
