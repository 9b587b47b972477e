// Kernel parameters of the sm90 forward kernel: the shared FwdArgs plus the TMA descriptors of
// q, k and v. Passed as one `const __grid_constant__` struct so the descriptors live in
// parameter space, where the TMA unit reads them (never a local copy).
#pragma once

#include <cuda.h>  // CUtensorMap (types only)

#include <cstdint>

#include "cuda/common/fwd_args.h"
#include "cuda/common/tile_schedule.h"

namespace fa4::cuda::sm90 {

// Every tensor map is 4-d, innermost first: (head dim, head, row, batch-like), boxes of
// 64 columns x rows x 1 head x 1 batch-like with 128-byte swizzle. A row / batch-like coordinate
// pair per layout:
//   q dense  (row = query i, b = batch)       q varlen (row = token0 + i, b = 0)
//   k dense  (row = key j, b = batch)         k varlen (row = cu_seqlens_k[b] + j, b = 0)
//   k cache  (row = key j, b = cache_batch_idx[b] or b)
struct Sm90Params {
  CUtensorMap tm_q;
  CUtensorMap tm_k;
  CUtensorMap tm_v;
  CUtensorMap tm_o;    // out, as tm_q (boxes of 64 columns x 64 rows); valid when tma_store
  int32_t tma_store;   // full 64-row tiles of O leave through TMA (else 16-byte stores)
  // Every tile has <= 64 rows (decode). 1 (sm90::solo_capable tiles): consumer 0 runs alone -- the
  // others exit at once, the rings and barriers count one consumer, no ping-pong turns. 2
  // (sm90::one_q_capable tiles, the 1Q tile): both consumers on the one Q tile, key tiles split
  // even / odd between them and merged at the tile's end; the K / V rings count one release per
  // slot, no ping-pong turns.
  int32_t solo = 0;
  FwdArgs a;
  TileSchedule sched;  // the virtual grid the persistent CTAs walk
  // sched.dynamic: {claimed, finished} -- tiles past the first round are claimed with one
  // atomicAdd each; every CTA adds 1 to finished at the end and the last one zeroes both, so the
  // pair is zero again for the next launch on the stream (cuda/tile_counters.h).
  uint32_t* tile_counter = nullptr;
  // FA4_SM90_FUSED_COMBINE builds, split-KV: one arrival counter per (tile, consumer) -- the
  // last split to finish a consumer's rows merges them (fwd_epilogue.cuh) and zeroes its counter
  // again; nullptr: the combine kernel merges (cuda/backend.cpp). split_slots: counters there.
  uint32_t* split_counter = nullptr;
  int64_t split_slots = 0;
  // FA4_SM90_TRACE builds only (fwd_trace.cuh): the timeline records, one per CTA. Present in
  // every build so the struct's layout never depends on a switch a variant build recompiles.
  uint64_t* trace = nullptr;
  // The fp8 instances (Tile::fp8, fp8_long_keys, fp8_kv) only; after every other field, so the 16-bit
  // instances' parameter offsets are those they had. q / k / v_descale [B, Hkv] (nullptr = 1;
  // element b * s0 + hk * sh; fp8_kv: no q_descale): q x k fold into the score scale of the tile's
  // (batch, kv head), v into its output scale. (the all-fp8 tiles) tm_v then maps the call's V^T
  // workspace (fp8_layout.h Fp8VtLayout, cols x dv x hkv x bl).
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  int64_t qd_s0 = 0, qd_sh = 0, kd_s0 = 0, kd_sh = 0, vd_s0 = 0, vd_sh = 0;
  // The balanced walk (sched.balanced_n > 0, sm90::balanced_walk instances): the pieces' (O, m, l)
  // register states, [2 slots per CTA][consumer][kORegs + 4][128 threads] floats, and one arrival
  // counter per (remainder tile, consumer), zero before the launch and zeroed again by the tile's
  // last arrival (cuda/tile_counters.h; fwd_epilogue.cuh merge_piece).
  float* piece_state = nullptr;
  uint32_t* piece_counter = nullptr;
  // The keys-on-M decode kernel (decode_kv.cuh) only: factors per (token, kv head) (*_tok = 1;
  // k_descale / v_descale then address key j's factor as k's rows are, with these strides and
  // kd_s0 / kd_sh, vd_s0 / vd_sh: common/seq_info.cuh KvAddr).
  int64_t kd_s1 = 0, vd_s1 = 0;
  int32_t k_tok = 0, v_tok = 0;
};

}  // namespace fa4::cuda::sm90
