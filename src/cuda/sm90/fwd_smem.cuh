// Shared storage of the sm90 forward kernel: one struct, carved once at kernel entry.
//
// Tiles are stored as TMA writes them with 128-byte swizzle: a [rows x D] 16-bit tile is D / 64
// column chunks, each [rows][64] (128-byte rows, 16-byte pieces XOR'd by row % 8). Each chunk
// starts 1024-byte aligned (every chunk holds a multiple of 8 rows), which both the swizzle
// pattern and the wgmma descriptors' zero base offset need.
//   q[c][chunk]   the 64 query rows of consumer c; reused as that consumer's O staging tile in
//                 the epilogue (its wgmma reads of Q are complete by then; Dv <= Dqk)
//   k[s][chunk]   K ring slot s (kBlockN keys)
//   v[s][chunk]   V ring slot s
#pragma once

#include <cstdint>

#include "cuda/common/pipeline.cuh"
#include "cuda/sm90/fwd_config.h"

namespace fa4::cuda::sm90 {

template <typename Elem, int kDqk, int kDv, int kBlockN, int kStages, int kConsumers>
struct alignas(1024) SharedStorage {
  static constexpr int kQChunk = kRowsPerConsumer * 64;  // elements of one 64-column chunk
  static constexpr int kKVChunk = kBlockN * 64;
  static_assert(kBlockN % 8 == 0, "chunks must stay 1024-byte aligned");
  alignas(1024) Elem q[kConsumers][kDqk / 64][kQChunk];
  alignas(1024) Elem k[kStages][kDqk / 64][kKVChunk];
  alignas(1024) Elem v[kStages][kDv / 64][kKVChunk];
  MbarRing<kStages> k_ring;
  MbarRing<kStages> v_ring;
  uint64_t q_full;
};

}  // namespace fa4::cuda::sm90
