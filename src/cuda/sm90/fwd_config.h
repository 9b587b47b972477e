// Tile configurations of the sm90 (Hopper) forward kernel, host- and device-visible.
//
// One CTA = one producer warpgroup + `consumers` consumer warpgroups (2 or 3); each consumer owns
// 64 query rows (wgmma M = 64), so a CTA covers block_m = 64 * consumers rows of one (batch,
// head). K and V stream through separate mbarrier rings of `stages` slots of block_n keys.
//
// Registers per consumer thread (fp32 accumulators): S = block_n / 2, O = Dv / 2, P (16-bit A
// fragments) = block_n / 4 (e4m3: block_n / 8), inside the setmaxnreg budget of fwd_schedule.h
// (240 with two consumers, 160 with three).
// Shared memory = (block_m * Dqk + stages * block_n * (Dqk + Dv)) * element bytes (2; e4m3 1)
// + barriers (+ the 16-bit O staging tile where it fits: separate_o).
#pragma once

#include <cstdint>

// Ablation switches (docs/perf/sm90-notes.md): each FA4 idea can be built out, to measure what it
// is worth (bench/stage_sm90_variant.sh builds such a libfa4 beside the main one).
//   FA4_SM90_PINGPONG      1: the consumers take turns issuing GEMMs (named barriers)
//   FA4_SM90_OVERLAP       1: softmax of tile t runs while P V of tile t - 1 is on the tensor cores
//   FA4_RESCALE_THRESHOLD  (common/softmax.cuh, both GPU kernels) 0: the running max is exact;
//                          8: FA4's conditional rescale (faster, less accurate: softmax.cuh)
//   FA4_SM90_EXP2_EMU      -1: per-dim default (exp2_emu_every); N >= 0: every N-th exponential on
//                          the FMA pipes for every dim (0: none)
#ifndef FA4_SM90_PINGPONG
#define FA4_SM90_PINGPONG 1
#endif
#ifndef FA4_SM90_OVERLAP
#define FA4_SM90_OVERLAP 1
#endif
//   FA4_SM90_HALF_VOTE     0: one rescale decision per warp (16 rows); 1: per row half (8 rows):
//                          fewer O multiplies with an exact max, +1-4 % at every dim (H200,
//                          0480626 A/B, docs/perf/sm90-notes.md), bit-identical output
#ifndef FA4_SM90_HALF_VOTE
#define FA4_SM90_HALF_VOTE 1
#endif
//   FA4_SM90_GROW_FLAGS    1: the O rescale branches on the softmax's warp-uniform grow flags
//                          instead of voting again on alpha != 1 (one or three votes fewer per
//                          key tile; same output bits); 0: the votes (default until an H200 A/B
//                          decides: written in a session without device time, compiled only)
#ifndef FA4_SM90_GROW_FLAGS
#define FA4_SM90_GROW_FLAGS 0
#endif
#ifndef FA4_SM90_EXP2_EMU
#define FA4_SM90_EXP2_EMU -1
#endif
//   FA4_SM90_PERSISTENT    1: one CTA per SM walks the tiles (common/tile_schedule.h), the next
//                          tile's loads under the current one's epilogue; 0: one CTA per tile
#ifndef FA4_SM90_PERSISTENT
#define FA4_SM90_PERSISTENT 1
#endif
//   FA4_SM90_MASKED_LPT    1: dense causal / windowed problems run persistent in one global
//                          heaviest-first order, CTAs snaking (cuda/plan.cpp schedule_sm90);
//                          0: L2-sized sections, one CTA per tile past 16 tiles per sequence
//   FA4_SM90_TMA_STORE     1: full 64-row O tiles are written by TMA from the staging tile
//                          (instances with a separate O staging tile: fwd_kernel.cuh kTmaStore)
//   FA4_SM90_UNIFORM_C     1: the consumer index broadcast from lane 0 (uniform_consumer_index)
#ifndef FA4_SM90_UNIFORM_C
#define FA4_SM90_UNIFORM_C 1
#endif
#ifndef FA4_SM90_TMA_STORE
#define FA4_SM90_TMA_STORE 1
#endif
//   FA4_SM90_O_IN_V        1: the standard D = 256 tile (no room for an O tile of its own) stages
//                          O over the V ring (FA3's layout) instead of the consumer's Q tile: the
//                          next tile's Q loads under the last P V and the epilogue, and the next
//                          tile's first V waits until the staged O is stored (o_empty). Same-run
//                          A/B on the H200 (docs/perf/h200-2026-12-03-session.md): +3.1 / +1.5 %
//                          at S 1k / 2k non-causal, +2.8 / +1.4 % causal, +-0.5 % from 4k (where
//                          the 80-key long_keys tile, left in Q, takes over). With a TMA store
//                          the instance spilled in its mainloop (-3 to -20 %): 16-byte stores.
//                          0: staged in Q everywhere.
#ifndef FA4_SM90_O_IN_V
#define FA4_SM90_O_IN_V 1
#endif
//   FA4_SM90_P_DOUBLE      1: P double-buffered in registers on the two-consumer Dv <= 128 tiles
//                          (fwd_consumer.cuh kPDouble): the packing of P_t overlaps the P V of
//                          t - 1 and the P V wait moves behind the next K spin. ncu at D 128 S 16k
//                          (821fe4b): 12.3 % of the stall samples on that wait, which ptxas had
//                          placed above the softmax's row max. 2: the D 256 tiles as well.
//                          0 until an H200 A/B decides.
#ifndef FA4_SM90_P_DOUBLE
#define FA4_SM90_P_DOUBLE 0
#endif
//   FA4_SM90_FP8_P_DOUBLE  1: the 128-key e4m3 D 128 tile double-buffers P too, as the D 128
//                          long_keys and e4m3 fp8_long_keys tiles always do (H100 2026-12-07: -1.1 to
//                          -3 % at S 1k / 4k, docs/perf/h100-2026-12-07c-fp8-p-double.md)
#ifndef FA4_SM90_FP8_P_DOUBLE
#define FA4_SM90_FP8_P_DOUBLE 0
#endif
//   FA4_SM90_PAGED         1: paged KV caches whose page size is a multiple of the tile's key
//                          block run on the sm90 kernel (the issue-13 path "TMA with the page id as
//                          a coordinate": the producer reads one page-table entry per key tile,
//                          the K / V tensor maps address (head dim, head, row in page, page));
//                          0: they stay on the sm80 kernel (chunked prefill against a paged cache
//                          ran there at 0.42-0.44 of FA3 on the contiguous one, H200 2026-12-03).
//                          H200 2026-12-04 (docs/perf/h200-2026-12-04-session.md): device tests
//                          pass, chunked prefill at page 256 2.3x the sm80 path (= contiguous).
#ifndef FA4_SM90_PAGED
#define FA4_SM90_PAGED 1
#endif
//   FA4_SM90_PAGED_SUB     1: (with FA4_SM90_PAGED) pages smaller than the key tile too, when
//                          they divide it, hold a multiple of 8 rows and at least
//                          FA4_SM90_SUB_PAGE_MIN: one TMA box per page (fwd_producer.cuh
//                          load_pages). H200 2026-12-04 (docs/perf/h200-2026-12-04-session.md),
//                          against sm80: page 64 chunked prefill 2.1-2.3x (= 0.95 of contiguous),
//                          decode B 1 +2-12 %; page 16 decode B 1 +8 % at kv 8k but -11 % at
//                          128k (2 KB boxes): the minimum stays 64 rows until smaller pages win.
#ifndef FA4_SM90_PAGED_SUB
#define FA4_SM90_PAGED_SUB 1
#endif
#ifndef FA4_SM90_SUB_PAGE_MIN
#define FA4_SM90_SUB_PAGE_MIN 64
#endif
//   FA4_SM90_PAGED_GATHER  1: paged caches whose page size the TMA loads above do not take (pages
//                          of 1, 3, 16, 32 rows, any size not a multiple of the key tile nor a
//                          sub-tile page of >= FA4_SM90_SUB_PAGE_MIN rows) run on the sm90 kernel's
//                          gather instances (fwd_gather.h): the producer warpgroup's 128 threads
//                          copy K / V rows by cp.async, each row's address from the page table,
//                          into the slots the TMA would fill; head dims 64 / 128 / 256 (unpadded).
//                          2: every paged cache takes them (an A/B against the TMA page loads).
//                          0: those caches stay on the sm80 kernel. H100 2026-12-05: device
//                          tests and the three sanitizers clean; against sm80 on pages 1 / 16,
//                          chunked prefill B 4 Sq 512 kv 64k page 16 2.0x, decode B 1 / 4 kv 8k
//                          +3-9 %, B 32 and kv 128k +-1 % (docs/perf/h100-2026-12-05c-session.md): 1.
#ifndef FA4_SM90_PAGED_GATHER
#define FA4_SM90_PAGED_GATHER 1
#endif
//   FA4_SM90_SOLO          1: launches whose tiles all have <= 64 rows (decode: PackGQA rows of
//                          one query token) run consumer 0 alone (Sm90Params::solo): the other
//                          consumers did the same GEMMs on empty rows, which left the B 1 decode
//                          at ~31 GB/s per SM, compute-bound (H200 2026-12-04: 2 consumers x
//                          2 GEMMs of 64 x 128 x 128 per 64 KB key tile). H200 2026-12-05: B 1 / 4
//                          +2-5 %; B 32 -2 % when it also took sm80's unsplit decode shapes (no
//                          longer: cuda/plan.cpp sm80_takes_decode keeps them on sm80).
//                          The fp8_kv tile runs alone regardless (solo_capable below).
#ifndef FA4_SM90_SOLO
#define FA4_SM90_SOLO 0
#endif
//   FA4_SM90_ONE_Q         The 1Q tile (issue 13 item 2): launches whose tiles all have <= 64
//                          rows (decode: PackGQA rows of a few query tokens) run both consumer
//                          warpgroups on the one 64-row Q tile, consumer c on the key tiles
//                          c, c + 2, ... with its own (O, m, l), merged through shared memory
//                          at the end of the tile (fwd_consumer.cuh merge_pair): half the GEMM
//                          and softmax work per consumer and key tile, where solo launches leave
//                          consumer 1 idle and pair launches spend it on empty rows. 1: the fp8_kv
//                          tile (its converters feed one consumer at ~12 bytes of e4m3 per SM
//                          clock on the H100 and the H200 alike, which is 93 % of the H100's HBM
//                          but 65 % of the H200's); 2: also the D 128 16-bit tiles (standard,
//                          split_kv). Measured 2026-12-06 (docs/perf/h200-2026-12-06b-session.md):
//                          first with P V of tile t held over S of t + 2 (the pair's overlap) on
//                          the H200: fp8-KV 0.77-0.82x of the solo consumer's tokens/s, 16-bit
//                          B 1 / 4 decode at kv 128k -18 % -- each consumer owns every other ring
//                          slot, so the in-order producer waited on one consumer's P V before the
//                          other's next K. Serial (FA4_SM90_ONE_Q_SERIAL) on the H100: level at
//                          16k-64k keys, 3-6 % behind at 4k (the merge per tile); tests and the
//                          three sanitizers clean. The H100's HBM caps the fp8-KV tile there, so
//                          the per-SM gain it was built for needs an H200 A/B: 0 until then.
//                          H200 2026-12-07 (with SKIP_EMPTY_WARPS, B 32 fp8-KV decode, kv 4k / 16k /
//                          64k): +1.6 / +6.3 / +7.8 % on the e4m3 cache, bf16 level
//                          (docs/perf/h200-2026-12-07e-fp8kv-1q-ab.md); its device tests and the
//                          16-bit B 1 / 4 decode A/B still to run before it flips.
#ifndef FA4_SM90_ONE_Q
#define FA4_SM90_ONE_Q 0
#endif
//   FA4_SM90_ONE_Q_SERIAL  1: a 1Q consumer's P V of key tile t completes before its S of t + 2
//                          issues (no overlap inside the warpgroup; the other consumer's GEMMs
//                          fill the tensor cores), so its V slot frees a tile earlier.
#ifndef FA4_SM90_ONE_Q_SERIAL
#define FA4_SM90_ONE_Q_SERIAL 1
#endif
//   FA4_SM90_SKIP_EMPTY_WARPS 1: consumer warps whose 16 rows are all past the tile's rows skip
//                          the softmax (decode: 4 PackGQA rows leave warps 1-3 of consumer 0 and
//                          all of consumer 1 empty; their issue slots go to the fp8_kv converter
//                          warps sharing their SM sub-partitions). H100 2026-12-06: fp8-KV
//                          -1 to +1.5 %, 16-bit decode +-2 % (the H100's HBM caps the fp8-KV
//                          tile). H200 2026-12-07: fp8-KV B 32 +4.3 / +6.3 / +6.2 % at kv 4k / 16k
//                          / 64k, bf16 level (docs/perf/h200-2026-12-07e-fp8kv-1q-ab.md); 0 until
//                          its device tests run with it.
#ifndef FA4_SM90_SKIP_EMPTY_WARPS
#define FA4_SM90_SKIP_EMPTY_WARPS 0
#endif
//   FA4_SM90_FUSED_COMBINE 1: split-KV launches merge their partials in the kernel: the last
//                          split to finish a consumer's 64 rows (an atomic counter per tile and
//                          consumer) merges them (sm90/fwd_epilogue.cuh merge_split_rows), so no
//                          combine kernel follows -- in the split_kv instance (D 128, fused_merge
//                          below; the planner picks it for split launches only with this switch
//                          on). H100 2026-12-05 (docs/perf/h100-2026-12-05-session.md, the
//                          split_kv build against 0 in one process): decode B 1 / 4 at kv 8k
//                          +7-9 % (Sq 1 and 4, contiguous and paged), kv 128k +1-2 %, B 32 and
//                          chunked prefill 1.00 (they do not split); 0 switches it off.
#ifndef FA4_SM90_FUSED_COMBINE
#define FA4_SM90_FUSED_COMBINE 1
#endif
//   FA4_SM90_CALLED_MERGE  1: the split_kv instance calls merge_split_rows instead of inlining it.
//                          Inlined, its per-thread row loops make ptxas compile the whole
//                          consumer loop as divergent: SASS of the D 128 / D 64 split_kv key loops
//                          46 / 32 R2UR feeding the wgmma descriptors and 3 BRA.DIV before the
//                          rescale votes in every key tile, 0 / 0 called (bench/sass_loop.py;
//                          docs/perf/h100-2026-12-07-session.md). A call has its own price (in the
//                          standard tile it cost 3-9 %, fwd_epilogue.cuh), and here too: decode
//                          A/B on an H100 (2026-12-07, docs/perf/h100-2026-12-07b-cmerge.md; the
//                          device tests pass with it) ran it 0.93-0.98x at B 1 / 4 (kv 8k, 128k),
//                          1.00x at B 32. The loop's uniformity was not what split decodes pay
//                          for, so 0 (tests/check_sass_loops.py allows those 3 BRA.DIV).
#ifndef FA4_SM90_CALLED_MERGE
#define FA4_SM90_CALLED_MERGE 0
#endif
//   FA4_SM90_TILE_SPLITS   1: the split count of a decode counts whole key tiles (core/splits.h
//                          tile_granular_splits): the fewest tiles per split that one wave of
//                          CTAs holds. The waves rule gave B 1 kv 2k / 8k 7 / 14 splits of 3 / 5
//                          tiles (an empty last split) where 8 / 16 splits run 2 / 4 (host probe,
//                          2026-12-05). Not yet run on a GPU: 0 until an A/B
//                          (bench/stage_sm90_variant.sh ts -DFA4_SM90_TILE_SPLITS=1).
//   FA4_SM90_SPLIT_KV_ALL_DIMS  1: split-KV launches at D 256 run their split_kv instance (the
//                          in-kernel merge) at any row count; 0: only where it measured faster
//                          (split_kv_pays below). An ablation switch (test_plan_switches plans
//                          with it on).
#ifndef FA4_SM90_SPLIT_KV_ALL_DIMS
#define FA4_SM90_SPLIT_KV_ALL_DIMS 0
#endif
#ifndef FA4_SM90_TILE_SPLITS
#define FA4_SM90_TILE_SPLITS 0
#endif
//   FA4_SM90_PDL           1: the kernel is launched as a programmatic dependent of the stream's
//                          previous grid (ptx::griddep_*): its CTAs start, and init their
//                          barriers, while that grid's last CTAs still run, and wait for it before
//                          any global access. For decode calls of ~20-30 us, where a launch's ramp
//                          and drain are a visible share. H200 2026-12-05: decode +-2 %, prefill
//                          (D 64 / 128) +-0.5 %: kept 0. The fp8 V^T pre-pass triggers its
//                          dependent at its start (fwd_fp8_vt.cu); H100 2026-12-06, e4m3 prefill
//                          S 1k-16k: +-2 % (docs/perf/h100-2026-12-06d-session.md).
#ifndef FA4_SM90_PDL
#define FA4_SM90_PDL 0
#endif
//   FA4_SM90_DECODE        1: the sm90 kernel takes decode-shaped problems too (issue 13): PackGQA
//                          (a group's query heads share one kv head's tile rows: fwd_work.cuh),
//                          split-KV with fp32 partials merged by cuda/combine (fwd_epilogue.cuh),
//                          and the planner routes to it wherever it supports the problem, not only
//                          where its unsplit grid fills the GPU (cuda/plan.cpp). 0: those stay on
//                          the sm80 kernel. H200 2026-12-04 (docs/perf/h200-2026-12-04-session.md):
//                          device tests pass; decode B 1 / 4 +2-17 % over sm80 (both with the new
//                          combine), B 32 -0.7-2 % (left on sm80: cuda/plan.cpp sm80_takes_decode).
#ifndef FA4_SM90_DECODE
#define FA4_SM90_DECODE 1
#endif
//   FA4_SM90_BALANCED_SECTIONS  1: short masked dense sequences take the static order (section,
//                          snake) of smallest predicted makespan (cuda/plan.cpp
//                          balance_static_order); 0: the L2-sized sections, round robin
#ifndef FA4_SM90_BALANCED_SECTIONS
#define FA4_SM90_BALANCED_SECTIONS 1
#endif
//   FA4_SM90_LPT_SECTIONS  1: long masked dense sequences take an L2-sized divisor section
//                          (snaking) instead of the global snake where the model balances it
//                          within 2 % (cuda/plan.cpp; H200 A/B: causal S 4k D 128 +8.4 %, D 64
//                          +3.8 %, 8k-16k unchanged: no such section); 0: the global snake
#ifndef FA4_SM90_LPT_SECTIONS
#define FA4_SM90_LPT_SECTIONS 1
#endif
#ifndef FA4_SM90_MASKED_LPT
#define FA4_SM90_MASKED_LPT 1
#endif
//   FA4_SM90_DYNAMIC       1: where the instance walks dynamically (dynamic_walk below), long
//                          masked dense sequences and masked varlen ones run persistent with
//                          the tiles claimed from a device counter (fwd_producer.cuh), long
//                          dense ones in two phases (common/tile_schedule.h heavy_x); 0: the
//                          static orders of FA4_SM90_MASKED_LPT, one CTA per varlen tile
#ifndef FA4_SM90_DYNAMIC
#define FA4_SM90_DYNAMIC 1
#endif
//   FA4_SM90_BALANCED      1: unmasked dense D 128 problems whose whole tiles leave the last round
//                          partly idle run the balanced instance (Tile::balanced): whole rounds
//                          round-robin, then the last round's tiles in equal shares of key tiles
//                          (common/tile_schedule.h balanced_n), a tile's pieces merged by the last
//                          to finish (fwd_epilogue.cuh merge_piece). The first form (shares over
//                          the whole grid, merge code in the standard instance) was correct and
//                          lost: 0.56-0.89x unmasked (every head's K / V in flight), 0.94-0.97x
//                          causal (the code's presence) -- H100 2026-12-06,
//                          docs/perf/h100-2026-12-06g-session.md. This form (H100, same day):
//                          correct, other launches unchanged, the balanced ones 0.94-0.96x (the
//                          instance's key loop runs slower, as the split merge's did). With the
//                          piece merge branching on a lane-0 broadcast (uniform loop, b2f6ae9;
//                          H100 2026-12-07, docs/perf/h100-2026-12-07b-cmerge.md): 0.958 / 0.998 /
//                          1.009x main at S 1k / 4k / 16k -- under 1 % to gain, 4 % to lose: 0.
#ifndef FA4_SM90_BALANCED
#define FA4_SM90_BALANCED 0
#endif
//   FA4_SM90_HEAVY_PCT     the dynamic walk's first phase: this percentage of every dense
//                          sequence's query tiles, the heaviest (cuda/plan.cpp schedule_sm90).
//                          Same-run A/Bs against 50 (H200, two calls, h200-2026-12-03b-session.md):
//                          65 +0.9-1.4 % causal D 128 8k-16k / D 256 4k-16k both times; 35
//                          -0.7-2.4 %; 80 +1.1-2.5 % but -5.3 % at D 256 8k. Non-causal: no effect.
//   FA4_SM90_DYNAMIC_SHORT_D64  1: the short_masked D = 64 tile walks dynamically too
#ifndef FA4_SM90_DYNAMIC_SHORT_D64
#define FA4_SM90_DYNAMIC_SHORT_D64 1
#endif
//   FA4_SM90_DYNAMIC_ALL_MASKED  1: every masked problem of an instance with the walk takes it
//                          (short dense ones too: the static balanced orders unused); 0: only
//                          those no static order balances (cuda/plan.cpp schedule_sm90). A/B switch.
#ifndef FA4_SM90_DYNAMIC_ALL_MASKED
#define FA4_SM90_DYNAMIC_ALL_MASKED 0
#endif
#ifndef FA4_SM90_HEAVY_PCT
#define FA4_SM90_HEAVY_PCT 65
#endif
// Tile shapes per head-dim class, for the A/B runs that choose them (docs/perf/sm90-notes.md):
// key tiles (wgmma N of S = Q K^T: 64, 80, 128, 176, 192 or 256) and consumer warpgroups.
#ifndef FA4_SM90_BLOCK_N_D64
#define FA4_SM90_BLOCK_N_D64 128
#endif
#ifndef FA4_SM90_BLOCK_N_D128
#define FA4_SM90_BLOCK_N_D128 128
#endif
#ifndef FA4_SM90_BLOCK_N_D256
#define FA4_SM90_BLOCK_N_D256 64
#endif
#ifndef FA4_SM90_CONSUMERS_D64
#define FA4_SM90_CONSUMERS_D64 3
#endif
// The second tile of D = 256 (Tile::long_keys): key tiles for long key sequences.
#ifndef FA4_SM90_BLOCK_N_D256_LONG
#define FA4_SM90_BLOCK_N_D256_LONG 80
#endif
// Where the planner switches tiles (cuda/plan.cpp sm90_tile), for the A/Bs that move the
// boundaries: the short_masked D = 64 tile up to this many query rows per sequence (masked
// problems), the long_keys D = 256 tile from this many keys (masked problems: causal rows see
// half the keys on average), or FA4_SM90_LONG_KEYS_MIN_SK_UNMASKED without a mask. Measured before
// the uniform consumer index and the dynamic short tile (sm90-notes.md): short_masked -5 % at
// causal 2k, long_keys -2 to -6 % at S <= 1k. Again on an H100 (2026-12-07, two same-run A/Bs,
// docs/perf/h100-2026-12-07c-d256-long-keys.md): the 80-key tile unmasked +3.4-3.7 % at S 1k / 2k,
// -1.9 % at 512; causal +1.5-1.7 % at 2k, -1.6 to -2.1 % at 1k, -3.9 % at 512.
#ifndef FA4_SM90_SHORT_MASKED_MAX_SQ
#define FA4_SM90_SHORT_MASKED_MAX_SQ 1024
#endif
// (A/B switch) The two-consumer D = 64 tile for unmasked problems up to this many query rows too
// (0: never; measured -4 to -16 % without a mask on 2026-12-02, and again on an H100 on 2026-12-07
// at 1024: unmasked S 1k 0.916x, 4k and causal level -- docs/perf/h100-2026-12-07e-hd-su1k.md).
#ifndef FA4_SM90_SHORT_UNMASKED_MAX_SQ
#define FA4_SM90_SHORT_UNMASKED_MAX_SQ 0
#endif
#ifndef FA4_SM90_LONG_KEYS_MIN_SK
#define FA4_SM90_LONG_KEYS_MIN_SK 2048
#endif
#ifndef FA4_SM90_LONG_KEYS_MIN_SK_UNMASKED
#define FA4_SM90_LONG_KEYS_MIN_SK_UNMASKED 1024
#endif
// The long_keys D = 128 tile (the standard tile with P double-buffered, fwd_consumer.cuh kPDouble)
// for unmasked problems from this many keys; -1: no such instance. FA4_SM90_P_DOUBLE=1 on the
// standard tile measured +1.1 % at D 128 from S = 4k and -1.3 to -1.8 % at S 1k (H200,
// 2026-12-04, e1d637e). As an instance of its own, same-run A/B on an H100 (2026-12-07, two runs,
// docs/perf/h100-2026-12-07c-long-keys.md): unmasked +0.9 / +1.6 / +1.7 % at S 4k / 8k / 16k,
// -1.2 % at 2k; causal -0.5 to +0.2 % from 4k, -2.4 % at 2k -- so unmasked from 4096 keys only.
#ifndef FA4_SM90_LONG_KEYS_MIN_SK_D128
#define FA4_SM90_LONG_KEYS_MIN_SK_D128 4096
#endif
// K / V ring stages. D = 128 fits 3 only with O staged in Q (separate_o turns off: 32 + 3 * 64
// KB + barriers = 226 KB); ncu showed its consumers ~3 % of stall samples waiting on the ring
// (2ff92ce, sm90-notes.md), to be weighed against the lost Q / epilogue overlap.
#ifndef FA4_SM90_STAGES_D64
#define FA4_SM90_STAGES_D64 3
#endif
#ifndef FA4_SM90_STAGES_D128
#define FA4_SM90_STAGES_D128 2
#endif
//   FA4_SM90_FP8           1: all-fp8 (e4m3 q / k / v) calls the fp8 instances support (Tile::fp8:
//                          D 64 / 128 / 256, not paged, not split) run on them automatically
//                          unless sm80 would split them more than the tile's speed makes up for
//                          (cuda/plan.cpp plan_fp8_all); 0: they stay on the sm80 kernel unless
//                          FA4_CUDA_KERNEL=sm90 forces them. H100 2026-12-05: device tests and
//                          sanitizers clean, 2.0-13x sm80's fp8 path, 0.73-1.17 of FA3's fp8
//                          (docs/perf/h100-2026-12-05b-session.md): 1.
#ifndef FA4_SM90_FP8
#define FA4_SM90_FP8 1
#endif
//   FA4_SM90_FP8_KV        1: fp8-KV calls (16-bit q, e4m3 k / v cache, per-(batch, kv head)
//                          factors or none) with a Tile::fp8_kv instance (D 128) run on the sm90
//                          kernel (cuda/plan.cpp): the cache's bytes come in by TMA, the producer
//                          warpgroup's three idle warps widen them to the 16-bit ring
//                          (fwd_fp8_kv.cuh), the consumers run the 16-bit mainloop. Per-token
//                          factors stay on the sm80 kernel. 0: every fp8-KV call stays there
//                          (sm80's byte tiles widened by every thread read the e4m3 cache at
//                          1.0-1.1 TB/s on an H100, 0.65-0.71x the tokens/s of a bf16 cache).
//                          H100 2026-12-05 (docs/perf/h100-2026-12-05c-session.md): device tests
//                          and the three sanitizers clean; B 32 decode 32/8 kv 4k-64k 1.4-1.7 TB/s
//                          of e4m3 bytes, 1.05-1.15x the bf16 cache's tokens/s (with the solo
//                          consumer, solo_capable): 1.
#ifndef FA4_SM90_FP8_KV
#define FA4_SM90_FP8_KV 1
#endif
// The fp8_kv tile's key block, 16-bit ring stages and e4m3 byte ring stages (tile_cfg below).
// H100 2026-12-05, B 32 decode, tokens/s over the bf16 cache: (128, 2, 2) 0.91-0.98; more bytes
// in flight lost -- (64, 2, 8) 0.76-0.85, (64, 3, 6) 0.76-0.85, (128, 1, 4) 0.78-0.83: the tile is
// not waiting on HBM latency but on its converters and consumers.
#ifndef FA4_SM90_FP8_KV_BLOCK_N
#define FA4_SM90_FP8_KV_BLOCK_N 128
#endif
#ifndef FA4_SM90_FP8_KV_STAGES
#define FA4_SM90_FP8_KV_STAGES 2
#endif
#ifndef FA4_SM90_FP8_KV_BYTE_STAGES
#define FA4_SM90_FP8_KV_BYTE_STAGES 2
#endif
// K / V^T ring stages of the fp8 tiles (their tiles are half the bytes of the 16-bit ones).
#ifndef FA4_SM90_FP8_STAGES_D64
#define FA4_SM90_FP8_STAGES_D64 3
#endif
#ifndef FA4_SM90_FP8_STAGES_D128
#define FA4_SM90_FP8_STAGES_D128 3
#endif
//   FA4_SM90_FP8_VT_IN_KERNEL  1: the 128-key e4m3 D 128 tile (Tile::fp8) transposes V in the kernel
//                          instead of reading the pre-pass's V^T workspace; 2: the D 64 tile too;
//                          0: both read the pre-pass's (fwd_fp8_vt.cu). The producer's TMA brings V's
//                          rows into a byte ring (one more slot per ring stage: D 128 16 KB each, 194
//                          KB in all) and the producer warpgroup's warps 1-3 transpose each slot into
//                          the V^T ring (fp8_vt_transpose.h: ldmatrix.x4.trans + 4 prmt +
//                          stmatrix.x4 per 512 bytes, ~8 instructions; fwd_fp8_vt_convert.cuh), 56
//                          registers for them (consumers 224 / 152 at two / three consumers). No
//                          pre-pass (10-15 % of an S 1k call), no workspace. H100 2026-12-07, whole
//                          calls against the pre-pass (docs/perf/h100-2026-12-07e-vtik.md): D 128
//                          unmasked S 1k / 2k / 4k 1.12 / 1.06 / 0.99x, causal 1.20 / 1.13 / 1.05x;
//                          D 64 1.03 / 1.04 / 0.93x, causal 1.07 / 1.06 / 1.01x -- its three
//                          consumer warps per sub-partition leave the converters less room: 2 only
//                          until D 64 keeps the pre-pass for long unmasked keys. (The first
//                          in-kernel transpose, 2026-12-06, 4-byte shared loads / stores: the
//                          kernel 8 % slower.)
#ifndef FA4_SM90_FP8_VT_IN_KERNEL
#define FA4_SM90_FP8_VT_IN_KERNEL 1
#endif
//   FA4_SM90_FP8_D64_CONSUMERS / FA4_SM90_FP8_D64_BLOCK_N  the e4m3 D 64 tile (Tile::fp8): 3 x 128
//                          (192 query rows, 128 keys) by default. FA3's is 192 x 160: ncu at S 4k
//                          (2026-12-06) shows fa4 executing 11 % more instructions than FA3 at
//                          better CPI -- the per-key-tile work, 1.25x as often per key. 3 x 192
//                          does not fit the registers (C7512, 240 bytes spilled); 2 x 192 does
//                          (0 spills), as does 2 x 256. Both measured on an H100 (2026-12-06f,
//                          same-run A/B, S 1k-16k, docs/perf/h100-2026-12-06f-session.md): 2 x 192
//                          0.79-0.92x of 3 x 128, 2 x 256 0.85-0.95x -- the third warpgroup to
//                          ping-pong with is worth more than 1.5-2x fewer key tiles per consumer.
//                          3 x 160 (FA3's tile; 32-key V^T chunks, 0 spills) against 3 x 128 (H100,
//                          same run): S 1k 0.91, 2k 0.97-0.98, 4k 0.99-1.00, 16k 1.023 / 1.028
//                          (non-causal / causal) -- so it is the long-keys tile below; as that
//                          (from 8192 keys), against main: 8k +1.2 / +1.6 %, 16k +2.8 / +2.8 %.
#ifndef FA4_SM90_FP8_D64_CONSUMERS
#define FA4_SM90_FP8_D64_CONSUMERS 3
#endif
#ifndef FA4_SM90_FP8_D64_BLOCK_N
#define FA4_SM90_FP8_D64_BLOCK_N 128
#endif
//   FA4_SM90_FP8_LONG_KEYS_MIN_SK  the e4m3 D 64 / D 128 calls whose longest key sequence has at
//                          least this many keys run the wider key tiles of Tile::fp8_long_keys (D 64
//                          160 keys, D 128 192), the others 128; negative: never. D 64: see
//                          FA4_SM90_FP8_D64_BLOCK_N above. FA3's fp8 D 128 tile is 128 x 224: at
//                          128 keys fa4's per-key-tile work (turn, waits, row max, votes) comes 1.5x
//                          as often per key as at 192. Same-run A/B on an H100 (2026-12-06, 192
//                          against 128 for every call; docs/perf/h100-2026-12-06d-session.md): S 16k +3.5-4.4 %
//                          (causal and not), 4k +0.3-0.6 %, 1k -8-10 % (1024 keys are 5 1/3 tiles of
//                          192: the last one a third full). 256 keys did not fit the registers (C7512).
#ifndef FA4_SM90_FP8_LONG_KEYS_MIN_SK
#define FA4_SM90_FP8_LONG_KEYS_MIN_SK 8192
#endif
//   FA4_SM90_FP8_LONG_KEYS_MIN_SK_UNMASKED  the same bound for calls without a mask (no causal /
//                          window / chunk): where the 128-key tile transposes V in the kernel
//                          (FA4_SM90_FP8_VT_IN_KERNEL) its converters cost most over long unmasked
//                          key rows (H100 2026-12-07, against the pre-pass at 4096 keys: D 128 0.99x,
//                          D 64 0.93x; causal 1.05 / 1.01x), so unmasked calls may take the wider
//                          pre-pass tiles earlier than masked ones.
#ifndef FA4_SM90_FP8_LONG_KEYS_MIN_SK_UNMASKED
#define FA4_SM90_FP8_LONG_KEYS_MIN_SK_UNMASKED FA4_SM90_FP8_LONG_KEYS_MIN_SK
#endif
//   FA4_SM90_FP8_LONG_KEYS_BLOCK_N_D64 / _D128  those tiles' keys. D 128 224 (FA3's 128 x 224;
//                          32-key V^T chunks, 16 bytes spilled outside the key loop) against 192 at
//                          S 16k (H100 2026-12-06f, same run): 1.000 / 0.999 -- no gain, and its V^T
//                          pad (896 columns) costs the shorter calls: 192.
#ifndef FA4_SM90_FP8_LONG_KEYS_BLOCK_N_D64
#define FA4_SM90_FP8_LONG_KEYS_BLOCK_N_D64 160
#endif
#ifndef FA4_SM90_FP8_LONG_KEYS_BLOCK_N_D128
#define FA4_SM90_FP8_LONG_KEYS_BLOCK_N_D128 192
#endif

namespace fa4::cuda::sm90 {

// Every N-th exponential of a softmax tile emulated on the FMA pipes (common/exp2.cuh), 0 = none.
constexpr int exp2_emu_every(int dqk) {
  if (FA4_SM90_EXP2_EMU >= 0) return FA4_SM90_EXP2_EMU;
  (void)dqk;
  // Measured off at every tile: bf16 every 4th / 2nd 0.84-0.99x (H200, 2026-12-01), e4m3 every 8th
  // / 4th 0.88-0.99x, worst at D 64 where MUFU work is twice the GEMMs' (H100, 2026-12-06; ncu:
  // issue 56 % busy, MUFU not the binding pipe). docs/perf/sm90-notes.md.
  return 0;
}

constexpr int kRowsPerConsumer = 64;  // wgmma M
constexpr int kMaxConsumers = 3;

struct TileCfg {
  int consumers, block_n, stages;
  int byte_stages = 0;  // (Tile::fp8_kv) stages of the e4m3 K / V byte rings the TMA fills
  constexpr int block_m() const { return consumers * kRowsPerConsumer; }
  constexpr int threads() const { return 128 * (1 + consumers); }
};

// The kernel head dims a problem's (dqk, dv) run on: both padded up to 64, 128 or 256 (zero-filled
// TMA boxes, guarded stores) when equal after padding, and (192, 128) (DeepSeek's MLA prefill:
// dqk in (128, 192], dv <= 128); false where no sm90 instance covers them.
struct DimPair {
  int dqk, dv;
};
constexpr bool padded_dims(int dqk, int dv, DimPair* out) {
  auto pad = [](int d) { return d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0; };
  if (dqk > 128 && dqk <= 192 && dv > 0 && dv <= 128) {
    *out = {192, 128};
    return true;
  }
  const int a = pad(dqk), b = pad(dv);
  if (a == 0 || a != b) return false;
  *out = {a, b};
  return true;
}

// The tiles a head-dim class has (one kernel instance each; the planner picks per problem,
// cuda/plan.cpp sm90_tile). Same-run A/B on the H200 (64d5649, docs/perf/sm90-notes.md):
//   standard      every head dim
//   short_masked  D = 64 only: two consumers (128-row tiles) instead of three: +6 % / +9 % at
//                 causal S = 512 / 1k (a 192-row tile's third warpgroup idles on short
//                 diagonals), -5 % at causal 2k and -4 to -16 % without a mask
//   long_keys     D = 256: 80-key tiles instead of 64: +1.3-3 % from S = 4k (causal and
//                 not); unmasked +3.5 % at 1k / 2k, causal +1.6 % at 2k, less below (H100,
//                 2026-12-07: FA4_SM90_LONG_KEYS_MIN_SK / _UNMASKED). D = 128 (FA4_SM90_LONG_KEYS_MIN_SK_D128 >= 0): the
//                 standard tile with P double-buffered in registers (Consumer::kPDouble), for
//                 unmasked problems: +0.9-1.7 % from S = 4k, -1.2 % at 2k (H100, 2026-12-07)
// split_kv: the tile of a split-KV launch, with the in-kernel merge of the splits compiled in
// (fused_merge) -- an instance of its own: compiled into the standard instance, the merge's call
// cost its prefill 3-4.5 % (H200 2026-12-05), though its SASS had no spill. D 128 and D 256: the
// standard tile; D 64: two consumers (as short_masked). Where a split launch takes it:
// split_kv_pays.
// fp8: the e4m3 tile of all-fp8 prefill (FwdTraits<__nv_fp8_e4m3, ...>; D 64 / 128 / 256, equal
// dims): Q / K tiles of e4m3 rows, V^T tiles from the call's pre-pass (fwd_fp8_vt.cu), 8-bit
// wgmma (k32), bf16 output. Prefill only: no split-KV, no paged cache (cuda/plan.cpp).
// fp8_kv: the tile of an fp8 KV cache under 16-bit q (D 128): the standard tile's consumers and
// 16-bit K / V ring, fed by converter warps from e4m3 byte rings (fwd_fp8_kv.cuh); k_descale
// folds into the score scale, v_descale into O, as Tile::fp8 folds them. Static walk only, no
// in-kernel split merge (split launches take the combine kernel).
// balanced: (FA4_SM90_BALANCED, D 128) the standard tile walking the balanced shares (common/
// tile_schedule.h balanced_n), with the merge of a cut tile's pieces -- an instance of its own:
// compiled into the standard one, that code slowed its launches 3-6 % where it never ran (H100
// 2026-12-06, causal D 128), as the split merge had (split_kv above).
enum class Tile { standard, short_masked, long_keys, split_kv, fp8, fp8_long_keys, fp8_kv, balanced };
// The all-fp8 tiles (e4m3 q / k / v, a V^T pre-pass): 128-key tiles, and 192-key ones at D 128
// for long key sequences (FA4_SM90_FP8_LONG_KEYS_MIN_SK).
constexpr bool is_fp8_tile(Tile t) { return t == Tile::fp8 || t == Tile::fp8_long_keys; }
// (FA4_SM90_FP8_VT_IN_KERNEL) The instances that transpose V themselves: e4m3 D 128 (1) and D 64 (2),
// 128-key tiles (D 256: no shared memory left for a byte ring).
constexpr bool fp8_vt_in_kernel(int dqk, int dv, Tile t) {
  return t == Tile::fp8 && dqk == dv &&
         ((FA4_SM90_FP8_VT_IN_KERNEL >= 1 && dqk == 128) ||
          (FA4_SM90_FP8_VT_IN_KERNEL >= 2 && dqk == 64 && FA4_SM90_FP8_D64_BLOCK_N == 128));
}
// Tiles whose launches of <= 64-row tiles run consumer 0 alone (Sm90Params::solo): all with
// FA4_SM90_SOLO, else the fp8_kv tile -- the widened 16-bit ring's GEMMs on empty rows held it
// back: H100 2026-12-05, B 32 decode 32/8 kv 4k-64k, tokens/s over the bf16 cache 0.93-0.97 ->
// 1.05-1.15 (+17 %; docs/perf/h100-2026-12-05c-session.md).
constexpr bool solo_capable(Tile t) { return FA4_SM90_SOLO || t == Tile::fp8_kv; }
// Tiles whose launches of <= 64-row tiles run as 1Q tiles (FA4_SM90_ONE_Q; Sm90Params::solo = 2):
// two consumers whose O staging is not the V ring (the pair merge exchanges O through consumer
// 1's staging space, fwd_smem.cuh o_stage) and no P double buffer. Takes precedence over solo.
constexpr bool one_q_capable(Tile t, int dqk, int dv) {
  return !FA4_SM90_P_DOUBLE && ((FA4_SM90_ONE_Q >= 1 && t == Tile::fp8_kv) ||
                                 (FA4_SM90_ONE_Q >= 2 && (t == Tile::standard || t == Tile::split_kv) && dqk == 128 && dv == 128));
}
// Bytes of one Q / K / V element of a tile's instance (Tile::fp8_kv: of its 16-bit rings; the
// cache's e4m3 bytes: kv_cache_bytes).
constexpr int elem_bytes(Tile t) { return is_fp8_tile(t) ? 1 : 2; }
// Bytes of one K / V element as the tile reads it from global memory.
constexpr int kv_cache_bytes(Tile t) { return is_fp8_tile(t) || t == Tile::fp8_kv ? 1 : 2; }
// Columns of one swizzle chunk of the Q / K tiles (fwd_smem.cuh): a 128-byte swizzle row (64
// 16-bit or 128 e4m3 elements); e4m3 rows of 64 bytes (D 64) are one 64-byte-swizzle chunk.
constexpr int qk_chunk_cols(int dqk, Tile t) { return !is_fp8_tile(t) ? 64 : dqk <= 64 ? 64 : 128; }
// Whether a split-KV launch of these head dims with `rows` tile rows per (batch, grid head)
// (Plan::rows) runs the split_kv instance rather than its chosen tile + the combine kernel.
// Same-run A/B on an H100 (2026-12-05, docs/perf/h100-2026-12-05b-session.md; decode B 1 / 4 / 32,
// 32/8 and 64/8, Sq 1 / 4, kv 2k-32k, contiguous and page 64): D 64 +2-12 % at B 1 / 4 at every
// row count (the two-consumer tile beside the combine kernel's extra launch), B 32 1.00; D 256
// +1-7 % at <= 8 rows but 0.88-0.98 at 16 and 0.70-0.90 at 32 (B 1): its consumer keeps 16 local
// ops against the standard tile's 12, and with more rows per tile the merge's row passes grow.
constexpr bool split_kv_pays(int dqk, int64_t rows) {
  if (dqk == 256) return FA4_SM90_SPLIT_KV_ALL_DIMS || rows <= 8;
  return dqk == 64 || dqk == 128;
}
// Instances whose consumer index c is broadcast from lane 0 (fwd_kernel.cuh): ptxas then keeps
// c-derived values uniform -- the Q descriptors of S = Q K^T, which otherwise sit in vector
// registers and take two R2UR before each wgmma (16 per D 128 tile; ncu 2026-12-03, FA3 has none).
// SASS (2026-12-03): the loop's S wgmmas then issue from UIADD3 / UMOV like FA3's; R2UR in the
// instance D 128 198 -> 178, D 64 134 -> 102, D 256 long_keys 314 -> 190 (local ops 70 -> 32).
// Same-run A/B on the H200 (2026-12-03, docs/perf/h200-2026-12-03c-session.md): D 128 +0.9-1.7 %
// (S 1k-16k, causal and not), D 256 long_keys +2.1-2.8 % (S >= 4k), the D 64 short_masked tile
// +0.4-1 % (causal <= 1k, varlen); the standard D 64 tile -0.4 to -1.5 % without a mask: not
// there, nor the standard D 256 tile (its SASS spilled 48 local ops more between its GEMMs).
// The (192, 128) tile: R2UR 288 -> 196, spills 16 either way.
constexpr bool uniform_consumer_index(int dqk, Tile t) {
  return FA4_SM90_UNIFORM_C && !(t == Tile::standard && (dqk == 64 || dqk == 256)) && !(t == Tile::split_kv && dqk == 256);
}
// Instances whose producer can claim tiles from a counter and walk two phases. Not the standard
// D = 64 tile: its three-consumer instance leaves the producer 32 registers, and the walk's state
// plus the phased coordinates there cost 4.5-7 % causal and non-causal alike (H200, 2026-12-02,
// docs/perf/sm90-notes.md; compiled with it on 2026-12-03, its consumers spilled 74 local ops).
// The two-consumer short_masked D = 64 tile (masked varlen with sequences <= 1k) compiles with it
// spill-free and has it (FA4_SM90_DYNAMIC_SHORT_D64): same-run A/B on the H200 (2026-12-03,
// docs/perf/h200-2026-12-03c-session.md), varlen causal D 64 with max_seqlen hints, one CTA per
// tile before: +75 / +34 % at S 256 / 1k (varlen / dense 0.51 / 0.71 -> 0.90 / 0.96).
// (Not Tile::fp8_kv: its converter warps walk the schedule beside the producer warp, and the
// dynamic walk's claimed tile index is broadcast within warp 0 only, as in the gather instances.)
constexpr bool dynamic_walk(int dqk, Tile t = Tile::standard) {
  return FA4_SM90_DYNAMIC && t != Tile::fp8_kv && (dqk > 64 || (FA4_SM90_DYNAMIC_SHORT_D64 && t == Tile::short_masked));
}
// Instances that walk the balanced shares (FA4_SM90_BALANCED): Tile::balanced. (A piece that hands
// its state over skips the epilogue and hands back what it would release: fwd_epilogue.cuh
// hand_back.)
constexpr bool balanced_walk(int dqk, int dv, Tile t) {
  return FA4_SM90_BALANCED && FA4_SM90_PERSISTENT && t == Tile::balanced && dqk == 128 && dv == 128;
}
constexpr bool has_tile(Tile t, int dqk, int dv) {
  return t == Tile::standard || (t == Tile::short_masked && dqk <= 64) || (t == Tile::long_keys && dqk > 192) ||
         (t == Tile::long_keys && FA4_SM90_LONG_KEYS_MIN_SK_D128 >= 0 && dqk == 128 && dv == 128) ||
         balanced_walk(dqk, dv, t) ||
         ((t == Tile::split_kv || t == Tile::fp8) && dqk == dv && (dqk == 64 || dqk == 128 || dqk == 256)) ||
         (t == Tile::fp8_kv && dqk == dv && dqk == 128) ||
         (t == Tile::fp8_long_keys && dqk == dv && (dqk == 64 || dqk == 128));
}

constexpr TileCfg tile_cfg(int dqk, int dv, Tile t = Tile::standard) {
  // Starting points (FA3's hopper/tile_size.h, FA4's sm90 table; DESIGN §3), with the wgmma
  // N sizes the wrappers provide (sm90_ptx.cuh).
  if (t == Tile::fp8) {
    // The 16-bit tiles' rows and warpgroups with 128-key tiles everywhere: a V^T tile is then
    // [Dv rows][128 keys] = one 128-byte swizzle row per dim, the K-major B operand of the P V
    // wgmma, loaded like a K tile (and the pre-pass pads each sequence to 128 keys). Shared
    // memory (smem_bytes, + O's bf16 staging tile): D 64 3 consumers 12 + 3 x (8 + 8) + 24 KB;
    // D 128 16 + 3 x (16 + 16) + 32 KB; D 256 32 + 2 x (32 + 32) + 64 KB = 224 KB of the 227.
    // Registers per consumer thread: S 64 + O Dv / 2 + P 16 (e4m3: 128 keys / 8) -- D 256 208 of
    // 240, as FA3's 128 x 128 fp8 D 256 tile; D 64 112 of 160.
    if (dqk <= 64) return {FA4_SM90_FP8_D64_CONSUMERS, FA4_SM90_FP8_D64_BLOCK_N, FA4_SM90_FP8_STAGES_D64};
    if (dqk <= 128) return {2, 128, FA4_SM90_FP8_STAGES_D128};
    return {2, 128, 2};
  }
  if (t == Tile::fp8_long_keys) {
    // D 64 with 160-key tiles (FA3's 192 x 160): V^T slots of five 32-key chunks (32-byte
    // swizzle), registers per consumer thread S 80 + P 20 + O 32 of 160; shared memory
    // 12 + 3 x (10 + 10) + 24 KB.
    if (dqk <= 64) return {FA4_SM90_FP8_D64_CONSUMERS, FA4_SM90_FP8_LONG_KEYS_BLOCK_N_D64, FA4_SM90_FP8_STAGES_D64};
    // D 128 with 192-key tiles: V^T slots of three 64-key chunks (fp8_layout.h fp8_vt_chunk_keys),
    // registers per consumer thread S 96 + P 24 + O 64 of 240; shared memory 16 + 3 x (24 + 24)
    // + 32 KB.
    return {2, FA4_SM90_FP8_LONG_KEYS_BLOCK_N_D128, FA4_SM90_FP8_STAGES_D128};
  }
  if (t == Tile::fp8_kv) {
    // D 128: the standard tile (2 consumers, 128 keys, a 16-bit ring of 2 stages) plus 2 stages
    // of e4m3 byte slots. Shared memory: Q 32 KB + 16-bit ring 2 x (32 + 32) + byte ring
    // 2 x (16 + 16) + barriers and slack 2 = 226 KB of the 227; O is staged in Q (OStaging::q:
    // its own 32 KB tile does not fit). In flight: up to 2 x 32 KB of cache bytes per SM -- HBM
    // at ~3 TB/s over 132 SMs at ~1 us latency needs ~24 KB -- while the consumers read the
    // converted 16-bit ring, 2 stages deep.
    return {2, FA4_SM90_FP8_KV_BLOCK_N, FA4_SM90_FP8_KV_STAGES, FA4_SM90_FP8_KV_BYTE_STAGES};
  }
  if (dqk <= 64) {
    // (split_kv: two consumers as short_masked -- decode tiles have few rows, and the merge
    // inlined into the three-consumer tile spilled its key loop)
    if (t == Tile::short_masked || t == Tile::split_kv) return {2, FA4_SM90_BLOCK_N_D64, FA4_SM90_STAGES_D64};
    return {FA4_SM90_CONSUMERS_D64, FA4_SM90_BLOCK_N_D64, FA4_SM90_STAGES_D64};
  }
  if (dqk <= 128) return {2, FA4_SM90_BLOCK_N_D128, FA4_SM90_STAGES_D128};
  if (dqk <= 192) return {2, 128, 2};  // (192, 128): O staged in Q (separate_o does not fit)
  (void)dv;
  if (t == Tile::long_keys) return {2, FA4_SM90_BLOCK_N_D256_LONG, 2};
  return {2, FA4_SM90_BLOCK_N_D256, 2};
}

// The instances whose split-KV launches merge their own partials (FA4_SM90_FUSED_COMBINE): the
// split_kv tile (D 128). Elsewhere the merge spilled the consumers (inlined: the three-consumer
// D 64 tile 106 local ops, prefill -15-18 %; called: the 80-key D 256 tile 186, the (192, 128) tile
// 8) or slowed the prefill that shares the instance, so their splits go through the combine kernel.
constexpr bool fused_merge(int dqk, int dv, Tile t) { return t == Tile::split_kv && has_tile(t, dqk, dv); }

constexpr int kSmemLimit = 227 * 1024;  // the opt-in shared memory of one sm_90 block

// Q, the K / V rings (Tile::fp8_kv: and its e4m3 byte rings), the barriers (padded to the struct's 1024-byte alignment), and the
// 1024-byte alignment slack of the dynamic allocation (fwd_smem.cuh; fwd_kernel.cuh asserts
// equality with sizeof).
constexpr int smem_bytes_without_o(int dqk, int dv, Tile t = Tile::standard) {
  const TileCfg c = tile_cfg(dqk, dv, t);
  return (c.block_m() * dqk + c.stages * c.block_n * (dqk + dv)) * elem_bytes(t) + c.byte_stages * c.block_n * (dqk + dv) +
         (fp8_vt_in_kernel(dqk, dv, t) ? c.stages * c.block_n * dv : 0) + 1024 + 1024;
}
// The epilogue stages O in its own buffer where it fits: then Q of the next tile loads as soon as
// the last S = Q K^T of the current one is done, under its last P V and epilogue. Otherwise
// (D = 256) O is staged in the consumer's Q tile and the next Q waits for the epilogue.
constexpr bool separate_o(int dqk, int dv, Tile t = Tile::standard) {
  return smem_bytes_without_o(dqk, dv, t) + tile_cfg(dqk, dv, t).block_m() * dv * 2 <= kSmemLimit;
}
// Where the epilogue stages O: its own tile; over the V ring (FA4_SM90_O_IN_V: the standard
// D = 256 tile, whose ring holds the block_m x dv tile); or the consumer's Q tile.
enum class OStaging { own, v_ring, q };
constexpr OStaging o_staging(int dqk, int dv, Tile t = Tile::standard) {
  if (separate_o(dqk, dv, t)) return OStaging::own;
  const TileCfg c = tile_cfg(dqk, dv, t);
  if (FA4_SM90_O_IN_V && dqk > 192 && (t == Tile::standard || t == Tile::split_kv) && c.stages * c.block_n >= c.block_m())
    return OStaging::v_ring;
  return OStaging::q;
}
constexpr int smem_bytes(int dqk, int dv, Tile t = Tile::standard) {
  return smem_bytes_without_o(dqk, dv, t) + (separate_o(dqk, dv, t) ? tile_cfg(dqk, dv, t).block_m() * dv * 2 : 0);
}

}  // namespace fa4::cuda::sm90
