// Shared storage of the sm90 forward kernel: one struct, carved once at kernel entry.
//
// Tiles are stored as TMA writes them with 128-byte swizzle: a [rows x D] 16-bit tile is D / 64
// column chunks, each [rows][64] (128-byte rows, 16-byte pieces XOR'd by row % 8). Each chunk
// starts 1024-byte aligned (every chunk holds a multiple of 8 rows), which both the swizzle
// pattern and the wgmma descriptors' zero base offset need. e4m3 tiles (Tile::fp8, fp8_long_keys) have chunks
// of kChunk = 128 columns (one 128-byte row; D 64: 64 columns, 64-byte swizzle).
//   q[c][chunk]   the 64 query rows of consumer c
//   k[s][chunk]   K ring slot s (kBlockN keys)
//   v[s][chunk]   V ring slot s; e4m3: V^T ring slot s, [kDv rows][kVtKeys keys] per chunk of keys
//                 (fp8_layout.h fp8_vt_chunk_keys: 128, or 64 with 64-byte swizzle)
//                 (K-major: the P V wgmma's B operand, stored as a K tile is)
//   o[c][chunk]   consumer c's O staging tile (fwd_config.h separate_o); without it the epilogue
//                 stages O over the V ring (OStaging::v_ring: consumer c's [Dv / 64][64 rows x 64] tile at
//                 byte c * 64 * Dv * 2 of v, once every consumer's last P V has read it) or in
//                 q[c] (its wgmma reads of Q are complete by then; Dv <= Dqk)
//   os.k[s], os.v[s]  (Tile::fp8_kv, kByteStages > 0; in place of an O tile) e4m3 byte slot s of the cache's K / V
//                 rows as the TMA writes them: [kBlockN][128 bytes] per 128-column chunk, 128-byte
//                 swizzle; the converter warps widen it into k[s'] / v[s'] (fwd_fp8_kv.h)
//   os.vb[s]      (kVtBytes: FA4_SM90_FP8_VT_IN_KERNEL, beside the O tile) V byte slot s, [kBlockN][128
//                 bytes] as a K slot; the converter warps transpose it into v[s] (fp8_vt_transpose.h)
// Barriers: the K / V rings, q_full (producer -> consumers: the tile's Q landed, one phase per
// tile) and q_empty (consumers -> producer: Q may be overwritten; one arrival per consumer thread);
// o_empty (OStaging::v_ring: consumers -> producer, one arrival per consumer thread and tile: the O staged
// over the V ring has been read, the next tile's V may land); kvb_bars (Tile::fp8_kv): the byte
// rings (full: the TMA's bytes; empty: one arrival per converter thread) -- last, so the other
// instances' barrier offsets are what they were; vtb (kVtBytes) likewise: the V byte ring's
// barriers and each slot's row count (the producer's word to the converters), at the very end.
// (kvb_bars / vtb are empty structs elsewhere: 1 byte inside the struct's 1024-byte end padding.)
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/pipeline.cuh"
#include "cuda/sm90/fp8_layout.h"
#include "cuda/sm90/fwd_config.h"
#include "cuda/sm90/fwd_work.cuh"

namespace fa4::cuda::sm90 {

// OutElem: the output's type (the O staging tile); kChunk: columns of a Q / K chunk; kByteStages:
// (Tile::fp8_kv) stages of the e4m3 byte rings, 0 = none; kVtBytes: (FA4_SM90_FP8_VT_IN_KERNEL) a V
// byte ring of kStages slots beside the O tile.
template <typename Elem, typename OutElem, int kDqk, int kDv, int kBlockN, int kStages, int kConsumers,
          OStaging kOStaging, int kChunk = 64, int kByteStages = 0, bool kVtBytes = false>
struct alignas(1024) SharedStorage {
  static constexpr bool kSeparateO = kOStaging == OStaging::own, kOInV = kOStaging == OStaging::v_ring;
  static constexpr bool kVt = sizeof(Elem) == 1;          // e4m3: the V ring holds V^T tiles
  static constexpr int kQChunk = kRowsPerConsumer * kChunk;  // elements of one kChunk-column chunk
  static constexpr int kKVChunk = kBlockN * kChunk;
  static constexpr int kOChunk = kRowsPerConsumer * 64;      // O staging: 64-column (128-byte) chunks
  // V: Dv / 64 chunks of [kBlockN][64]; V^T: kBlockN / kVtKeys chunks of [kDv][kVtKeys].
  static constexpr int kVtKeys = fp8_vt_chunk_keys(kBlockN);
  static constexpr int kVChunks = kVt ? kBlockN / kVtKeys : kDv / 64;
  static constexpr int kVChunk = kVt ? kDv * kVtKeys : kBlockN * 64;
  static_assert(kBlockN % 8 == 0 && kDv % 8 == 0, "chunks must stay 1024-byte aligned");
  static_assert(kDqk % kChunk == 0 && (!kVt || kBlockN % kVtKeys == 0), "whole chunks");
  alignas(1024) Elem q[kConsumers][kDqk / kChunk][kQChunk];
  alignas(1024) Elem k[kStages][kDqk / kChunk][kKVChunk];
  alignas(1024) Elem v[kStages][kVChunks][kVChunk];
  struct OStage {
    alignas(1024) OutElem o[kConsumers][kDv / 64][kOChunk];
  };
  struct NoOStage {};
  static_assert(!kOInV || kStages * kBlockN >= kConsumers * kRowsPerConsumer, "the V ring holds every consumer's O tile");
  static constexpr bool kBytes = kByteStages > 0;
  struct ByteRing {  // [kBlockN][D] e4m3 per slot = D / 128 chunks of [kBlockN][128 bytes]
    alignas(1024) uint8_t k[kBytes ? kByteStages : 1][kBlockN * kDqk];
    alignas(1024) uint8_t v[kBytes ? kByteStages : 1][kBlockN * kDv];
  };
  struct ByteBars {
    MbarRing<kBytes ? kByteStages : 1> k, v;
  };
  struct NoBytes {};
  static_assert(!(kBytes && kSeparateO), "the fp8_kv tile stages O in Q (fwd_config.h)");
  struct OStageVBytes {  // (kVtBytes) the O tile, then the V byte ring: [kBlockN][kDv] e4m3 per slot
    alignas(1024) OutElem o[kConsumers][kDv / 64][kOChunk];
    alignas(1024) uint8_t vb[kStages][kBlockN * kDv];
  };
  static_assert(!kVtBytes || (kSeparateO && !kBytes && kVt), "the V byte ring sits beside an e4m3 tile's own O tile");
  // The O staging tile (OStaging::own; kVtBytes: and the V byte ring) or the byte ring (fp8_kv),
  // never both: one member, so an instance without either keeps the 1-byte placeholder it had.
  std::conditional_t<kBytes, ByteRing,
                     std::conditional_t<kSeparateO, std::conditional_t<kVtBytes, OStageVBytes, OStage>, NoOStage>>
      os;
  MbarRing<kStages> k_ring;
  MbarRing<kStages> v_ring;
  uint64_t q_full;
  uint64_t q_empty;
  // The producer's TileWork of each tile, published ahead of its Q (two slots by tile parity) so
  // the consumers skip computing it (~7 % of their time at short causal lengths,
  // bench/sm90_trace.py); work_full: one producer arrival per tile, the last one with valid = 0.
  PublishedWork work[2];
  uint64_t work_full;
  uint64_t o_empty;
  std::conditional_t<kBytes, ByteBars, NoBytes> kvb_bars;
  // (1Q tiles, fwd_consumer.cuh) per row of the Q tile: consumer 1's (m, l) for the merge, or
  // (bf16 q computed in fp16) consumer 0's row factor 2^-s for consumer 1. Last, inside the
  // struct's 1024-byte end padding: the other members keep their offsets, sizeof its value.
  float pair_ml[kRowsPerConsumer][2];
  // (1Q) the merge's hand-offs, two phases per tile (one per pass): pair_full, consumer 1's 128
  // threads -> consumer 0 (a pass is written); pair_empty, consumer 0's 128 -> consumer 1 (read).
  uint64_t pair_full, pair_empty;
  // (kVtBytes) The V byte ring: full = the producer's arrival + the TMA's bytes, empty = one arrival
  // per converter thread; rows[s]: the keys of slot s inside the sequence (the converters store
  // zeros from there), written by the producer before its arrival, or kVtEnd past the walk's end.
  struct VtBytes {
    MbarRing<kStages> bars;
    int32_t rows[kStages];
  };
  static constexpr int32_t kVtEnd = -1;
  std::conditional_t<kVtBytes, VtBytes, NoBytes> vtb;

  __device__ __forceinline__ uint8_t* kb(int s) { return os.k[s]; }  // (kBytes) byte slot s of K / V
  __device__ __forceinline__ uint8_t* vb(int s) {
    if constexpr (kVtBytes) return os.vb[s];  // (kVtBytes) V byte slot s
    else return os.v[s];
  }
  // The rings the TMA fills: the byte rings of Tile::fp8_kv, else the K / V rings themselves.
  static constexpr int kTmaStages = kBytes ? kByteStages : kStages;
  __device__ __forceinline__ MbarRing<kTmaStages>& k_tma_ring() {
    if constexpr (kBytes) return kvb_bars.k;
    else return k_ring;
  }
  __device__ __forceinline__ MbarRing<kTmaStages>& v_tma_ring() {
    if constexpr (kBytes) return kvb_bars.v;
    else if constexpr (kVtBytes) return vtb.bars;
    else return v_ring;
  }

  __device__ __forceinline__ uint8_t* o_stage(int c) {
    if constexpr (kSeparateO) return reinterpret_cast<uint8_t*>(os.o[c][0]);
    else if constexpr (kOInV) return reinterpret_cast<uint8_t*>(v[0][0]) + c * kRowsPerConsumer * kDv * sizeof(OutElem);
    else return reinterpret_cast<uint8_t*>(q[c][0]);
  }
};

}  // namespace fa4::cuda::sm90
