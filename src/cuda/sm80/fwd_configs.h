// Tile configurations of the sm80 portable forward kernel (host- and device-visible).
//
// Two shapes per head-dim pair, and a third where both can exceed a small GPU's shared memory:
//   prefill  M = 128 query rows per CTA (64 at D = 256), warps stacked along M (FlashAttention-2
//            layout: each warp owns 16 or 32 rows and all keys of a tile, so softmax needs no
//            cross-warp exchange);
//   decode   M = 16 rows (one query token x the GQA group, PackGQA), warps side by side along
//            the keys of a tile; each warp keeps its own running max / sum / O and the CTA merges
//            them once at the end (the in-CTA LSE combine of FA4's 1Q variant). Deeper K/V
//            pipeline: decode is a pure stream of K/V bytes;
//   compact  D = 192 / 256 on GPUs with 99 KB per block (sm_86 / sm_89), general instance only.
// Head dims are instantiated for 64, 128, 192, 256 and (Dqk, Dv) = (192, 128); others are padded
// up (zero-filled loads, guarded stores).
#pragma once

namespace fa4::cuda::sm80 {

struct TileCfg {
  int m, n, warps_m, warps_n, stages;
  // pair_dv: warps 2i and 2i + 1 each compute S = Q K^T for their own 16 rows (softmax stays
  // warp-local), swap the 16-bit P fragments through shared memory, and each accumulates O for
  // both warps' 32 rows over one half of Dv. Per 64 x 64 tile at D = 256 the warps read 240 KB of
  // shared memory instead of 288 KB (each V byte feeds 32 rows instead of 16), with no extra
  // barrier: the swap rides on the single-buffer schedule's mid-iteration __syncthreads.
  int pair_dv = 0;
};

constexpr TileCfg prefill_cfg(int dqk, int dv) {
  // Registers per thread (fp32 accumulators): S = (m / warps_m / 16) * (n / 8) * 4,
  // O = (m / warps_m / 16) * (dv / 8) * 4. D = 64: 128 + 64; D = 128: 64 + 128; D >= 192 uses
  // warps of 16 rows so O (dv / 2 regs) stays below the 255-register limit without spills.
  // Shared memory = (m * dqk + stages * n * (dqk + dv)) * 2 bytes: 80 / 96 / 144 / 96 KB.
  //
  // D = 256: 64 x 64 tiles, 4 warps, single K and V buffers (kStages = 1, FlashAttention-2's
  // load schedule): 98 KB, so two CTAs share an SM and one's prologue / epilogue hides behind the
  // other's math. Measured on H200 (2026-11-29, same sweep, same run) against 128 x 64 x 8 warps
  // with a 2-stage ring (192 KB, one CTA per SM): 0.87-1.07x FA2 vs 0.85-1.02x non-causal,
  // 0.94-1.14x vs 0.86-1.13x causal. A 64 x 32 2-stage tile (97 KB) measured 0.75-0.98x: its
  // barriers per FLOP double. The same 2-barrier schedule with a 2-stage ring at 1 CTA / SM
  // (D = 64 / 128 / 256) lost 4-13% at S = 2k: the mid-iteration barrier only pays when
  // another CTA fills the gap. 64 x 48 tiles with K and V sharing a 3-slot ring (about one
  // iteration of lead time per load, 104 KB) measured 0.88-0.93x FA2 non-causal vs 0.97-1.06x
  // for this tile: per-tile overhead on 25% less work (docs/perf/h200-2026-11-29-b2af610.md).
  // With pair_dv (same run, H200, 2026-11-29, docs/perf/h200-2026-11-29-bbec67f.md):
  // non-causal S = 512 / 1k +1.5 / +0.2%, S >= 2k -0.9..0.0%; causal +0.2..+1.6% at every S.
  // 128 x 64 x 8 warps with single buffers (FlashAttention-2's own D = 256 tile, 1 CTA / SM)
  // measured 0.87-0.93x of this tile without pair_dv.
  return dqk <= 64    ? TileCfg{128, 128, 4, 1, 2}
         : dqk <= 128 ? TileCfg{128, 64, 4, 1, 2}
         : dv <= 128  ? TileCfg{128, 64, 8, 1, 2}   // (192, 128)
         : dqk <= 192 ? TileCfg{128, 64, 8, 1, 2}
                      : TileCfg{64, 64, 4, 1, 1, 1};
}

constexpr TileCfg decode_cfg(int dqk, int dv) {
  // 16 rows, 4 warps across 64 keys (16 keys each). Stages: 3 keeps two K/V tiles in flight per
  // CTA with two CTAs per SM at D = 128 (100 KB each).
  return dqk + dv <= 256 ? TileCfg{16, 64, 1, 4, 3} : TileCfg{16, 64, 1, 4, 2};
}

// Which tile a launch uses. compact: the fallback for GPUs whose opt-in shared memory per block
// (99 KB on sm_86 / sm_89) holds neither the prefill nor the decode tile of a head-dim pair.
enum class Tile { prefill, decode, compact };

// Compact tile: 64 x 64, 4 warps, single K / V buffers, no pair_dv: (64 * dqk + 64 * (dqk + dv))
// * 2 bytes + the paged ring = 100,352 bytes at D = 256, 75,776 at D = 192 (<= 101,376, the
// sm_86 / sm_89 opt-in). Only the dims whose other tiles both exceed that limit have it.
constexpr bool has_compact(int dqk, int dv) { return dqk > 128 && dv > 128; }
constexpr TileCfg compact_cfg(int, int) { return TileCfg{64, 64, 4, 1, 1}; }

constexpr TileCfg tile_cfg(Tile t, int dqk, int dv) {
  return t == Tile::decode ? decode_cfg(dqk, dv) : t == Tile::compact ? compact_cfg(dqk, dv) : prefill_cfg(dqk, dv);
}

// The pair_dv exchange area: the P fragment swap [warps][n / 16][32 lanes] x 16 B and two
// [warps][32] float2 exchanges (O rescale factors, final row scales).
constexpr int pair_bytes(const TileCfg& c) { return c.pair_dv ? c.warps_m * c.warps_n * 32 * (c.n / 16 * 16 + 2 * 8) : 0; }

constexpr int smem_bytes(const TileCfg& c, int dqk, int dv) {
  // Q + K/V stages (16-bit) + the paged-KV row-offset ring (2 x n int64 for k and for v) + the
  // pair_dv area.
  const int pipe = (c.m * dqk + c.stages * c.n * (dqk + dv)) * 2 + 4 * c.n * 8 + pair_bytes(c);
  const int epi = c.warps_n * c.m * (dv + 8) * 4 + 2 * c.warps_n * c.m * 4;
  return pipe > epi ? pipe : epi;
}

}  // namespace fa4::cuda::sm80

namespace fa4::cuda::sm80 {

// fp8 e4m3 inputs (fwd_fp8.cuh): none; an fp8 KV cache (e4m3 K / V, 16-bit q, which sets the
// compute type); or q, k, v all e4m3 (bf16 compute and output).
enum class Fp8 { none, kv, all };

// Shared memory of an fp8 instance (fwd_kernel.cuh carves it in this order): the 16-bit Q tile,
// one 16-bit K and one V tile (the widened current tile), the paged-KV offset ring, the pair_dv
// area; then the e4m3 byte ring (stages x n x (dqk + dv)), the per-token K / V factors (stages x
// n fp32 each) and the paged ring of the factors' offsets (2 x n int64 each). The all-fp8 Q
// bytes wait in the 16-bit K / V tiles until the first tile widens them.
constexpr int fp8_base_bytes(const TileCfg& c, int dqk, int dv) {
  return (c.m * dqk + c.n * (dqk + dv)) * 2 + 4 * c.n * 8 + pair_bytes(c);
}
constexpr int fp8_pipe_bytes(const TileCfg& c, int dqk, int dv) {
  return fp8_base_bytes(c, dqk, dv) + c.stages * c.n * (dqk + dv) + 2 * c.stages * c.n * 4 + 4 * c.n * 8;
}
constexpr int smem_bytes_fp8(const TileCfg& c, int dqk, int dv) {
  const int pipe = fp8_pipe_bytes(c, dqk, dv);
  const int epi = c.warps_n * c.m * (dv + 8) * 4 + 2 * c.warps_n * c.m * 4;
  return pipe > epi ? pipe : epi;
}
constexpr int smem_bytes(const TileCfg& c, int dqk, int dv, Fp8 fp8) {
  return fp8 == Fp8::none ? smem_bytes(c, dqk, dv) : smem_bytes_fp8(c, dqk, dv);
}

}  // namespace fa4::cuda::sm80
