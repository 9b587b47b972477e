// The sm90 (Hopper, sm_90a) forward kernel: FlashAttention-4's design on TMA + wgmma with warp
// specialization (DESIGN §3). Roles (fwd_schedule.h):
//   producer   warpgroup 0, one elected thread: TMA loads of Q, K ring, V ring (fwd_producer.cuh);
//              (Tile::fp8_kv) warps 1-3 widen the e4m3 K / V byte rings into the 16-bit rings
//              (fwd_fp8_kv.cuh); (FA4_SM90_FP8_VT_IN_KERNEL) warps 1-3 transpose the e4m3 tile's V
//              byte ring into its V^T ring (fwd_fp8_vt_convert.cuh)
//   consumers  warpgroups 1 .. consumers: 64 query rows each; GEMMs, online softmax, ping-pong
//              (fwd_consumer.cuh), then the epilogue (fwd_epilogue.cuh); in solo launches
//              consumer 0 alone
// Persistent: the CTAs (at most one per SM) walk the tiles of the virtual grid (block_m-row query
// tile, query head, batch) in the order of common/tile_schedule.h -- heavy tiles first under a
// causal mask, K / V of few heads at a time in L2. The producer walks that order and publishes
// each tile's TileWork in shared memory for the consumers (computing it there was ~7 % of their
// time at short causal lengths; with it published: +2.5-8 % at S 1k-2k, docs/perf/sm90-notes.md).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "cuda/ptx/sm90_ptx.cuh"
#include "cuda/sm90/fp8_layout.h"
#include "cuda/sm90/fwd_config.h"
#include "cuda/sm90/fwd_consumer.cuh"
#include "cuda/sm90/fwd_epilogue.cuh"
#include "cuda/sm90/fwd_fp8_kv.cuh"
#include "cuda/sm90/fwd_fp8_vt_convert.cuh"
#include "cuda/sm90/fwd_gather.cuh"
#include "cuda/sm90/fwd_params.h"
#include "cuda/sm90/fwd_producer.cuh"
#include "cuda/sm90/fwd_schedule.h"
#include "cuda/sm90/fwd_smem.cuh"
#include "cuda/sm90/fwd_trace.cuh"
#include "cuda/sm90/fwd_work.cuh"

namespace fa4::cuda::sm90 {

template <typename Elem_, int kDqk_, int kDv_, Tile kTile_ = Tile::standard>
struct FwdTraits {
  using Elem = Elem_;
  static constexpr int kDqk = kDqk_, kDv = kDv_;
  static constexpr Tile kTile = kTile_;
  static_assert(has_tile(kTile, kDqk, kDv), "no such tile for these head dims (fwd_config.h)");
  // e4m3 q / k / v (Tile::fp8, fp8_long_keys): 8-bit wgmma, V^T tiles, bf16 output (DESIGN §1: fp8 in, bf16 out).
  static constexpr bool kFp8 = is_fp8_tile(kTile);
  static_assert(kFp8 == (sizeof(Elem) == 1) && sizeof(Elem) == static_cast<size_t>(elem_bytes(kTile)),
                "the fp8 tiles' instances take __nv_fp8_e4m3, the others 16-bit elements");
  // 16-bit q against an e4m3 K / V cache (Tile::fp8_kv): the cache's bytes widened into the
  // 16-bit rings by the producer warpgroup's converter warps (fwd_fp8_kv.h).
  static constexpr bool kFp8Kv = kTile == Tile::fp8_kv;
  // k_descale (x q_descale: Tile::fp8) folds into the score scale, v_descale into O.
  static constexpr bool kDescale = kFp8 || kFp8Kv;
  using OutElem = std::conditional_t<kFp8, __nv_bfloat16, Elem>;
  // Q arrives as Elem, is computed as Elem; F16ComputeTraits (fwd_fp8_kv.cuh) overrides both.
  using QElem = Elem;
  static constexpr bool kQToF16 = false;
  static constexpr int kChunk = qk_chunk_cols(kDqk, kTile);  // columns of a Q / K swizzle chunk
  static constexpr TileCfg kCfg = tile_cfg(kDqk, kDv, kTile);
  static constexpr int kBlockN = kCfg.block_n, kStages = kCfg.stages;
  static constexpr int kConsumers = kCfg.consumers, kBlockM = kCfg.block_m(), kThreads = kCfg.threads();
  static constexpr int kExp2EmuEvery = exp2_emu_every(kDqk);
  static constexpr OStaging kOStaging = o_staging(kDqk, kDv, kTile);
  static constexpr bool kSeparateO = kOStaging == OStaging::own;
  static constexpr bool kOInV = kOStaging == OStaging::v_ring;
  // Q is released after the tile's last S = Q K^T (not after the epilogue) unless O is staged in it.
  static constexpr bool kQFreeEarly = kOStaging != OStaging::q;
  // O leaves through a TMA store only from its own staging tile: staged in Q (D = 256), the
  // issuing thread's wait for the store's shared-memory reads delays Q's release, and the A/B
  // lost 0.3-7 % there (+0.3-7 % at D 128, +0.5-2.5 % at D 64; docs/perf/h200-2026-12-02b-session.md);
  // staged over the V ring, the TMA path made the D 256 consumer spill in its mainloop
  // (-3 to -20 %, docs/perf/h200-2026-12-03-session.md).
  static constexpr bool kTmaStore = FA4_SM90_TMA_STORE && kSeparateO;
  static constexpr bool kDynamicWalk = dynamic_walk(kDqk, kTile);  // the producer can claim tiles
  static constexpr bool kBalanced = balanced_walk(kDqk, kDv, kTile);  // equal shares of key tiles
  static constexpr bool kUniformC = uniform_consumer_index(kDqk, kTile);
  static constexpr bool kFusedMerge = fused_merge(kDqk, kDv, kTile);  // split-KV merged in-kernel
  // (FA4_SM90_FP8_VT_IN_KERNEL) V's rows land in a byte ring; producer warps 1-3 transpose them into
  // the V^T ring (fwd_fp8_vt_convert.cuh) -- no pre-pass.
  static constexpr bool kVtConvert = fp8_vt_in_kernel(kDqk, kDv, kTile);
  using Smem = SharedStorage<Elem, OutElem, kDqk, kDv, kBlockN, kStages, kConsumers, kOStaging, kChunk, kCfg.byte_stages,
                             kVtConvert>;
  static_assert(kFp8Kv == (kCfg.byte_stages > 0), "byte rings exactly in the fp8_kv tile");
  static constexpr int kSmemBytes = static_cast<int>(sizeof(Smem)) + 1024;  // + alignment slack
  static_assert(kSmemBytes == smem_bytes(kDqk, kDv, kTile), "fwd_config.h's smem_bytes is what the planner reserves");
  static_assert(kDv <= kDqk, "the O staging tile reuses the consumer's Q tile");
};

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) fwd_kernel(const __grid_constant__ Sm90Params P) {
#if FA4_PTX_SM90A
  extern __shared__ uint8_t smem_raw[];
  // 1024-byte aligned base: the swizzle pattern and the descriptors' zero base offset need it.
  const uint32_t mis = ptx::smem_u32(smem_raw) & 1023u;
  auto& sh = *reinterpret_cast<typename T::Smem*>(smem_raw + ((1024u - mis) & 1023u));

  // (fwd_params.h) consumer 0 alone, or (the 1Q tile) both consumers on one Q tile
  const bool one_q = one_q_capable(T::kTile, T::kDqk, T::kDv) && P.solo == 2;
  const bool solo = solo_capable(T::kTile) && P.solo != 0 && !one_q;
  const uint32_t consumers = solo ? 1u : static_cast<uint32_t>(T::kConsumers);
  if (threadIdx.x == 0) {
    // one release per consumer warpgroup (fwd_gather.cuh; fp8_kv: fwd_fp8_kv.cuh); 1Q: each key
    // tile's slots are one consumer's
    const uint32_t releases = one_q ? 1u : consumers;
    if constexpr (T::kFp8Kv) init_fp8_kv_rings<T>(sh, releases);
    else if constexpr (T::kVtConvert) init_vt_rings<T>(sh, releases);
    else init_kv_rings<T>(sh, releases);
    ptx::mbarrier_init(&sh.q_full, 1);
    ptx::mbarrier_init(&sh.q_empty, 128 * consumers);  // one arrival per consumer thread
    ptx::mbarrier_init(&sh.work_full, 1);
    ptx::mbarrier_init(&sh.o_empty, 128 * consumers);  // (kOInV) one arrival per consumer thread
    if constexpr (one_q_capable(T::kTile, T::kDqk, T::kDv)) {  // (1Q) the merge's hand-offs
      ptx::mbarrier_init(&sh.pair_full, 128);
      ptx::mbarrier_init(&sh.pair_empty, 128);
    }
    ptx::fence_mbarrier_init();
    trace::cta_start(P.trace);
  }
  __syncthreads();
  // (FA4_SM90_PDL) Launched while the previous grid of the stream may still run: every global
  // access (the schedule's sequence lengths, Q / K / V, the outputs a previous combine may still
  // read, the tile counters) waits for it here; only the barrier init above ran early. The next
  // grid may be scheduled at once: its CTAs take SMs as this grid's CTAs exit.
  if (FA4_SM90_PDL) {
    ptx::griddep_wait();
    ptx::griddep_launch_dependents();
  }

  if (role_of(threadIdx.x) == Role::producer) {
    ptx::setmaxnreg_dec<producer_regs(T::kConsumers, T::kTile, T::kVtConvert)>();
    // Warp 0; warps 1-3 exit -- except in a gather instance, whose four warps load K / V, in
    // the fp8_kv tile, whose warps 1-3 widen the K / V bytes warp 0's TMA loads bring, and in the
    // e4m3 tile with FA4_SM90_FP8_VT_IN_KERNEL, whose warps 1-3 transpose its V bytes.
    if (gathers_kv<T>() || threadIdx.x / 32 == 0) produce<T>(P, sh);
    else if constexpr (T::kFp8Kv) KvConverter<T>::run(P, sh, static_cast<int>(threadIdx.x) - 32);
    else if constexpr (T::kVtConvert) VtConverter<T>::run(sh, static_cast<int>(threadIdx.x) - 32);
    if constexpr (gathers_kv<T>()) cp_async_wait_all();
    if (threadIdx.x == 0) trace::role_exit(P.trace, 0);
    return;
  }
  ptx::setmaxnreg_inc<consumer_regs(T::kConsumers, T::kTile, T::kVtConvert)>();
  // (T::kUniformC) Broadcast from lane 0: ptxas then treats c as warp-uniform (as CUTLASS's
  // canonical_warp_group_idx does), so consumer c's Q descriptors stay in uniform registers.
  const int c = T::kUniformC ? __shfl_sync(0xffffffffu, consumer_of(threadIdx.x), 0) : consumer_of(threadIdx.x);
  if (solo && c > 0) return;  // rows 64 and up of every tile are empty
  // The GEMM turn goes round the consumers, tile after tile; consumer 0 has the first.
  if (FA4_SM90_PINGPONG && !solo && !one_q && c == 0) ptx::named_barrier_arrive(bar_id(Bar::turn0), 256);
  typename Consumer<T>::Ring st;  // the K / V rings run on across tiles
  uint32_t tiles_done = 0;        // the q_full phase
  uint64_t* const tr = threadIdx.x % 128 == 0 ? P.trace : nullptr;  // one stamping thread per role
  for (;;) {
    // The tile the producer computed (fwd_producer.cuh), published ahead of its Q.
    trace::stamp(tr, 1 + c, tiles_done, trace::walk_start);
    ptx::mbarrier_wait_parity(&sh.work_full, tiles_done & 1u);
    if (!sh.work[tiles_done & 1u].valid) break;
    const TileWork w = sh.work[tiles_done & 1u].w;
    trace::stamp(tr, 1 + c, tiles_done, trace::tile_start);
    // (e4m3) q_descale x k_descale of the tile's (batch, kv head); GQA: the query heads of kv
    // head w.hk share it, PackGQA tiles too. (fp8_kv: k_descale alone, q_descale is nullptr.)
    float qk_descale = 1.f;
    if constexpr (T::kDescale) {
      if (P.q_descale != nullptr) qk_descale = P.q_descale[w.batch * P.qd_s0 + w.hk * P.qd_sh];
      if (P.k_descale != nullptr) qk_descale *= P.k_descale[w.batch * P.kd_s0 + w.hk * P.kd_sh];
    }
    Consumer<T> cs(sh, P.a, w, c, solo, qk_descale, one_q);
    trace::stamp(tr, 1 + c, tiles_done, trace::cs_ready);
    ptx::mbarrier_wait_parity(&sh.q_full, tiles_done & 1u);
    // (F16ComputeTraits) bf16 Q -> fp16 in place, a power-of-two scale per row (fwd_consumer.cuh).
    if constexpr (T::kQToF16) cs.convert_q();
    trace::stamp(tr, 1 + c, tiles_done, trace::q_ready);
    trace::key_tiles(tr, 1 + c, tiles_done, w.n_tiles());
    cs.mainloop(st);
    trace::stamp(tr, 1 + c, tiles_done, trace::main_done);
    // (Balanced walk) A piece of a cut tile leaves its (O, m, l); the last of the tile's pieces to
    // finish merges them all and runs the epilogue (fwd_epilogue.cuh merge_piece).
    if constexpr (T::kBalanced && !gathers_kv<T>()) {
      if (w.split < 0 && !merge_piece<T>(P, cs)) {
        hand_back<T>(cs);
        ++tiles_done;
        continue;
      }
    }
    if constexpr (one_q_capable(T::kTile, T::kDqk, T::kDv)) {
      if (one_q) {
        // (1Q) Consumer 1's (O, m, l) into consumer 0's, which alone runs the epilogue. Consumer 1
        // wrote its O over its staging space (Q tile 1 where O is staged in Q): fenced for the
        // next Q's TMA there, then released as an epilogue would (kQFreeEarly: released already).
        if (w.n_tiles() >= 2) cs.merge_pair();
        if (c > 0) {
          if constexpr (!T::kQFreeEarly) {
            ptx::fence_proxy_async_shared_cta();
            cs.release_q();
          }
          ++tiles_done;
          continue;
        }
      }
    }
    epilogue<T>(P, cs);
    trace::stamp(tr, 1 + c, tiles_done, trace::epi_done);
    ++tiles_done;
  }
  // The last TMA stores read shared memory until they complete: not past the CTA's exit.
  if (T::kTmaStore && P.tma_store && threadIdx.x % 128 == 0) ptx::bulk_wait_group<0>();
  if (threadIdx.x % 128 == 0) trace::role_exit(P.trace, 1 + c);
#endif
}

}  // namespace fa4::cuda::sm90
