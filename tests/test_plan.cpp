// The cuda planner (src/cuda/plan.h) on the CPU: kernel and tile choice, the smem fallbacks of
// small GPUs, PackGQA, the grid (varlen tile bound, grid.z clamp), split-KV counts and the
// workspace. Expected values are worked out from the tile table (src/cuda/sm80/fwd_configs.h,
// src/cuda/simt/fwd_f32_config.h) in the comments, not from the planner's code. And
// fa4::describe_plan, through which every backend reports its choice.
#include "cuda/plan.h"

#include <algorithm>
#include <array>
#include <optional>
#include <random>
#include <vector>
#include <tuple>
#include <utility>

#include "core/problem.h"
#include "cuda/sm90/decode_kv.h"
#include "cuda/sm90/fwd_gather.h"
#include "test_util.h"

namespace fa4test {
namespace {

using fa4::core::Problem;
using fa4::cuda::DeviceLimits;
using fa4::cuda::Kernel;
using fa4::cuda::make_plan;
using fa4::cuda::Plan;
using fa4::cuda::sm80::Tile;

// The Problem fields the planner reads, for a problem of this shape (varlen: q packed to total_q rows).
struct Shape {
  DType dtype = DType::bfloat16;
  int64_t batch = 1, hq = 1, hkv = 1, dqk = 128, dv = 128, sq = 1, sk = 1;
  bool varlen = false;
  int64_t total_q = 0;
  int32_t num_splits = 0;
  bool paged = false;
  int64_t page_size = 16;     // paged: rows per page (k / v: [batch x pages per sequence, page, Hkv, D])
  int64_t q_head_stride = 0;  // 0: contiguous BSHD (dqk)
  int64_t v_head_stride = 0;  // 0: contiguous BSHD (dv)
  bool causal = false;
  int64_t window_right = -1;  // >= 0: a sliding window (what the planner reads of it)
  float softcap = 0.f;
  // The caller's hints; host_lengths: the lengths were read on the host (validate.cpp fills
  // seqlen_q / k), else they are device-resident and sq / sk are the tensor bounds.
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  bool host_lengths = false;
  bool kv_fp8 = false;  // an fp8 KV cache: e4m3 k / v under dtype (16-bit) q
  bool kv_tok = false;  // (kv_fp8) k / v factors per (token, kv head); else per (batch, kv head)
};

class Planned {
 public:
  explicit Planned(const Shape& s) {
    params_.num_splits = s.num_splits;
    params_.causal = s.causal;
    params_.window_right = s.window_right;
    params_.softcap = s.softcap;
    params_.q.shape[0] = s.varlen ? s.total_q : s.batch;
    params_.max_seqlen_q = s.max_seqlen_q, params_.max_seqlen_k = s.max_seqlen_k;
    if (s.host_lengths) pb_.seqlen_q.assign(s.batch, s.sq), pb_.seqlen_k.assign(s.batch, s.sk);
    pb_.p = &params_;
    pb_.backend = Backend::cuda;
    pb_.dtype = pb_.out_dtype = s.dtype;
    if (s.dtype == DType::float8_e4m3) pb_.out_dtype = DType::bfloat16;
    pb_.kv_fp8 = s.kv_fp8;
    pb_.kv_dtype = s.kv_fp8 ? DType::float8_e4m3 : s.dtype;
    if (s.kv_fp8) {  // (the planner reads whether the factors are there and per token, not their values)
      static const float factor = 1.f;
      pb_.k_sc.data = pb_.v_sc.data = &factor;
      pb_.k_sc.per_token = pb_.v_sc.per_token = s.kv_tok;
    }
    pb_.batch = s.batch, pb_.hq = s.hq, pb_.hkv = s.hkv, pb_.group = s.hq / s.hkv;
    pb_.dqk = s.dqk, pb_.dv = s.dv;
    pb_.varlen_q = s.varlen;
    pb_.sq_dense = s.varlen ? 0 : s.sq;
    pb_.max_sq = s.sq, pb_.max_sk = s.sk, pb_.kv_slot = s.sk;
    pb_.kv = s.paged ? fa4::core::KvLayout::paged : fa4::core::KvLayout::dense;
    if (s.causal) pb_.mask.right = 0;  // as validate.cpp normalizes it
    params_.k.shape[0] = params_.v.shape[0] = s.batch;
    // Contiguous BSHD strides (varlen q: tokens along dim 0), which TMA can address.
    const int64_t qh = s.q_head_stride ? s.q_head_stride : s.dqk;
    pb_.qs = {s.varlen ? s.hq * qh : s.sq * s.hq * qh, s.hq * qh, qh, 1};
    pb_.ks = {s.sk * s.hkv * s.dqk, s.hkv * s.dqk, s.dqk, 1};
    const int64_t vh = s.v_head_stride ? s.v_head_stride : s.dv;
    pb_.vs = {s.sk * s.hkv * vh, s.hkv * vh, vh, 1};
    if (s.paged) {  // every sequence in pages of its own
      pb_.page_size = s.page_size, pb_.max_pages = (s.sk + s.page_size - 1) / s.page_size;
      pb_.kv_slot = pb_.max_pages * s.page_size;
      params_.k.shape[0] = params_.v.shape[0] = s.batch * pb_.max_pages;
      pb_.ks.s0 = s.page_size * s.hkv * s.dqk, pb_.vs.s0 = s.page_size * s.hkv * s.dv;
    }
  }
  Plan on(const DeviceLimits& dl) const { return make_plan(pb_, dl); }
  const Problem& problem() const { return pb_; }

 private:
  AttentionParams params_;
  Problem pb_;
};

// An H200 as the automatic choice sees it (sm90 for prefill that fills the GPU).
DeviceLimits h200_auto() {
  DeviceLimits d;
  d.known = true;
  d.sms = 132, d.cc_major = 9, d.cc_minor = 0;
  d.smem_optin = 232448, d.smem_per_sm = 233472;
  return d;
}
// The sm80 tests: an H200 under FA4_CUDA_KERNEL=sm80.
DeviceLimits h200() {
  DeviceLimits d = h200_auto();
  d.prefer = Kernel::sm80;
  return d;
}
// sm_86 / sm_89: 99 KB per block.
DeviceLimits ampere_99kb() {
  DeviceLimits d;
  d.known = true;
  d.sms = 82, d.cc_major = 8, d.cc_minor = 6;
  d.smem_optin = 101376, d.smem_per_sm = 102400;
  return d;
}
DeviceLimits capped(int bytes) {  // FA4_CUDA_SMEM_OPTIN=bytes on an H200
  DeviceLimits d = h200();
  d.smem_optin = bytes, d.smem_per_sm = bytes + 1024;
  return d;
}

TEST(CudaPlan, PrefillTileNoSplitWhenTheGridFillsTheGpu) {
  const Plan pl = Planned({.batch = 2, .hq = 16, .hkv = 16, .sq = 4096, .sk = 4096}).on(h200());
  EXPECT_EQ(pl.kernel, Kernel::sm80);
  EXPECT_EQ(pl.sm80_tile, Tile::prefill);
  EXPECT_EQ(pl.m, 128);
  EXPECT_EQ(pl.n, 64);
  EXPECT_EQ(pl.smem, 100352);  // (128 x 128 + 2 stages x 64 x 256) x 2 B + 2 KB paged ring
  EXPECT_FALSE(pl.pack_gqa);
  EXPECT_EQ(pl.grid.x, 32);
  EXPECT_EQ(pl.grid.y, 16);
  EXPECT_EQ(pl.grid.z, 2);
  EXPECT_EQ(pl.splits, 1);  // 1024 CTAs >= 80% of 132 x 2 resident
  EXPECT_EQ(pl.workspace, 0u);
  EXPECT_EQ(pl.rows_total, 2 * 4096);
}

TEST(CudaPlan, DecodeTilePackGqaAndSplits) {
  // One token, Hq / Hkv = 32 / 8: 4 (row, head) pairs per kv head on the 16-row decode tile.
  const Plan pl = Planned({.batch = 1, .hq = 32, .hkv = 8, .sq = 1, .sk = 8192}).on(h200());
  EXPECT_EQ(pl.sm80_tile, Tile::decode);
  EXPECT_EQ(pl.m, 16);
  EXPECT_EQ(pl.n, 64);
  EXPECT_EQ(pl.smem, 104448);  // (16 x 128 + 3 stages x 64 x 256) x 2 B + 2 KB
  EXPECT_TRUE(pl.pack_gqa);
  EXPECT_EQ(pl.rows, 4);
  EXPECT_EQ(pl.grid.x, 1);
  EXPECT_EQ(pl.grid.y, 8);
  // 8 CTAs on 264 slots (2 per SM by shared memory): 29 splits are the first count whose wave
  // is >= 85% of the best (33: one full wave); 128 key tiles allow 64.
  EXPECT_EQ(pl.splits, 29);
  EXPECT_EQ(pl.grid.z, 29);
  EXPECT_EQ(pl.workspace, size_t{29} * 1 * 32 * (128 + 1) * 4);  // splits x rows x Hq x (Dv + lse) fp32
}

TEST(CudaPlan, HeadDimsPadToAnInstance) {
  auto dims = [](int64_t dqk, int64_t dv) {
    const Plan pl = Planned({.dqk = dqk, .dv = dv, .sq = 512, .sk = 512}).on(h200());
    return std::pair<int, int>(pl.dqk, pl.dv);
  };
  EXPECT_EQ(dims(40, 24), std::make_pair(64, 64));
  EXPECT_EQ(dims(96, 96), std::make_pair(128, 128));
  EXPECT_EQ(dims(64, 128), std::make_pair(128, 128));
  EXPECT_EQ(dims(192, 128), std::make_pair(192, 128));
  EXPECT_EQ(dims(160, 100), std::make_pair(192, 128));
  EXPECT_EQ(dims(128, 192), std::make_pair(192, 192));
  EXPECT_EQ(dims(200, 8), std::make_pair(256, 256));
}

TEST(CudaPlan, SmallSharedMemoryFallsBackToTilesThatFit) {
  // 99 KB: D = 256's prefill (110,592 B with the pair_dv exchange) and decode (141,312 B) tiles
  // do not fit, the compact 64 x 64 tile (100,352 B) does -- for prefill and decode shapes alike.
  const Shape prefill256{.batch = 2, .hq = 4, .hkv = 4, .dqk = 256, .dv = 256, .sq = 1000, .sk = 1000};
  const Shape decode256{.batch = 2, .hq = 8, .hkv = 2, .dqk = 256, .dv = 256, .sq = 1, .sk = 1000};
  for (const Shape& s : {prefill256, decode256}) {
    const Plan pl = Planned(s).on(ampere_99kb());
    EXPECT_EQ(pl.sm80_tile, Tile::compact);
    EXPECT_EQ(pl.m, 64);
    EXPECT_EQ(pl.smem, 100352);
  }
  EXPECT_EQ(Planned(prefill256).on(h200()).sm80_tile, Tile::prefill);
  EXPECT_EQ(Planned(decode256).on(h200()).sm80_tile, Tile::decode);
  // D = 192: compact 75,776 B.
  Shape p192 = prefill256;
  p192.dqk = p192.dv = 192;
  EXPECT_EQ(Planned(p192).on(ampere_99kb()).smem, 75776);
  // D = 128 decode: its 3-stage decode tile (104,448 B) does not fit 99 KB; prefill (100,352 B) does.
  const Plan d128 = Planned({.batch = 1, .hq = 8, .hkv = 2, .sq = 1, .sk = 4096}).on(ampere_99kb());
  EXPECT_EQ(d128.sm80_tile, Tile::prefill);
  EXPECT_EQ(d128.m, 128);
  EXPECT_TRUE(d128.pack_gqa);  // 1 row x group 4 < 128
  // 60,000 bytes: D = 64 prefill (86,016 B) runs on its decode tile (53,248 B); D = 256 has no
  // tile that fits and keeps the compact one (cuda_check refuses: smem > opt-in).
  const Plan d64 = Planned({.hq = 2, .hkv = 2, .dqk = 64, .dv = 64, .sq = 300, .sk = 517}).on(capped(60000));
  EXPECT_EQ(d64.sm80_tile, Tile::decode);
  EXPECT_EQ(d64.m, 16);
  EXPECT_EQ(d64.smem, 53248);
  EXPECT_EQ(d64.grid.x, 19);  // ceil(300 / 16)
  const Plan d256 = Planned(prefill256).on(capped(60000));
  EXPECT_EQ(d256.sm80_tile, Tile::compact);
  EXPECT_GT(d256.smem, 60000);
  // D = 64 has no compact tile: with nothing fitting, the decode tile stays.
  EXPECT_EQ(Planned({.dqk = 64, .dv = 64, .sq = 300, .sk = 517}).on(capped(40000)).sm80_tile, Tile::decode);
}

TEST(CudaPlan, UnknownDeviceAssumesEveryTileFitsAndDoesNotSplit) {
  const DeviceLimits none;
  const Plan pl = Planned({.hq = 8, .hkv = 1, .dqk = 256, .dv = 256, .sq = 1, .sk = 100000}).on(none);
  EXPECT_EQ(pl.sm80_tile, Tile::decode);
  EXPECT_EQ(pl.splits, 1);
  EXPECT_EQ(Planned({.dqk = 256, .dv = 256, .sq = 1, .sk = 100000, .num_splits = 4}).on(none).splits, 4);
}

TEST(CudaPlan, PackGqaOnlyWhenATileWouldBeMostlyEmpty) {
  // Short chunk (10 rows x group 8 = 80 pairs): PackGQA on the prefill tile, grid over kv heads.
  const Plan chunk = Planned({.batch = 3, .hq = 16, .hkv = 2, .sq = 10, .sk = 2048}).on(h200());
  EXPECT_TRUE(chunk.pack_gqa);
  EXPECT_EQ(chunk.sm80_tile, Tile::prefill);
  EXPECT_EQ(chunk.rows, 80);
  EXPECT_EQ(chunk.grid.x, 1);
  EXPECT_EQ(chunk.grid.y, 2);
  // A full tile of rows per head: no packing, grid over query heads.
  const Plan full = Planned({.batch = 3, .hq = 16, .hkv = 2, .sq = 128, .sk = 2048}).on(h200());
  EXPECT_FALSE(full.pack_gqa);
  EXPECT_EQ(full.rows, 128);
  EXPECT_EQ(full.grid.y, 16);
  // MHA never packs.
  EXPECT_FALSE(Planned({.hq = 4, .hkv = 4, .sq = 1, .sk = 2048}).on(h200()).pack_gqa);
}

TEST(CudaPlan, VarlenTilesBoundTheGridByTotalRows) {
  // 64 sequences, 1000 q tokens: ceil(1000 / 128) + 64 tiles, not 64 x ceil(max_sq / 128).
  Shape s{.batch = 64, .hq = 4, .hkv = 4, .dqk = 64, .dv = 64, .sq = 300, .sk = 400, .varlen = true, .total_q = 1000};
  Plan pl = Planned(s).on(h200());
  EXPECT_TRUE(pl.varlen_tiles);
  EXPECT_EQ(pl.grid.x, 8 + 64);
  EXPECT_EQ(pl.grid.z, pl.splits);  // the batch is walked in grid.x
  EXPECT_EQ(pl.rows_total, 1000);
  // With PackGQA the packed rows count: 1000 tokens x group 4.
  s.hq = 16, s.sq = 10;
  pl = Planned(s).on(h200());
  EXPECT_TRUE(pl.pack_gqa);
  EXPECT_EQ(pl.grid.x, 4000 / 128 + 1 + 64);
  EXPECT_EQ(pl.grid.y, 4);
  // No tokens: no tiles.
  s.total_q = 0;
  EXPECT_EQ(Planned(s).on(h200()).grid.x, 0);
}

TEST(CudaPlan, ForcedSplitsAndTheGridZClamp) {
  Plan pl = Planned({.batch = 3, .hq = 4, .hkv = 4, .dv = 128, .sq = 50, .sk = 300, .num_splits = 7}).on(h200());
  EXPECT_EQ(pl.splits, 7);
  EXPECT_EQ(pl.grid.z, 21);
  EXPECT_EQ(pl.workspace, size_t{7} * (3 * 50) * 4 * (128 + 1) * 4);
  // grid.z = batch x splits <= 65535: 20000 sequences keep 3 of 5 forced splits.
  pl = Planned({.batch = 20000, .hq = 1, .hkv = 1, .sq = 1, .sk = 300, .num_splits = 5}).on(h200());
  EXPECT_EQ(pl.splits, 3);
  EXPECT_EQ(pl.grid.z, 60000);
  // With varlen tiles grid.z is the split count alone: nothing to clamp.
  pl = Planned({.batch = 20000, .sq = 1, .sk = 300, .varlen = true, .total_q = 20000, .num_splits = 5}).on(h200());
  EXPECT_EQ(pl.splits, 5);
  EXPECT_EQ(pl.grid.z, 5);
  // num_splits = 1: off, whatever the heuristic would say.
  pl = Planned({.hq = 8, .hkv = 1, .sq = 1, .sk = 100000, .num_splits = 1}).on(h200());
  EXPECT_EQ(pl.splits, 1);
  EXPECT_EQ(pl.workspace, 0u);
  // Forced splits whose partials would pass 2^63 bytes (a claimed problem of broadcast views):
  // 100 x (2^31 - 1) rows x 65535 heads x 257 x 4 bytes wrapped size_t to a small workspace;
  // the call runs unsplit instead.
  const int64_t len = (int64_t{1} << 31) - 1;
  for (const DeviceLimits& dl : {h200(), h200_auto()}) {
    pl = Planned({.hq = 65535, .hkv = 65535, .dqk = 256, .dv = 256, .sq = len, .sk = len, .num_splits = 100}).on(dl);
    EXPECT_EQ(pl.splits, 1);
    EXPECT_EQ(pl.grid.z, 1);
    EXPECT_EQ(pl.workspace, 0u);
  }
  // Just below: 100 splits of 2^20 rows x 65535 heads x 129 x 4 bytes = 3.5e15 bytes, kept.
  pl = Planned({.hq = 65535, .hkv = 65535, .sq = 1 << 20, .sk = len, .num_splits = 100}).on(h200());
  EXPECT_EQ(pl.splits, 100);
  EXPECT_EQ(pl.workspace, size_t{100} * (size_t{1} << 20) * 65535 * 129 * 4);
}

TEST(CudaPlan, Fp32RunsTheSimtKernel) {
  // Actual dims (no padding): smem = 8 B x 2 x 32 offsets + q 8 x 100 + k 32 x 101 + v 32 x 64 floats.
  const Plan pl = Planned({.dtype = DType::float32, .batch = 2, .hq = 6, .hkv = 2, .dqk = 100, .dv = 40, .sq = 5, .sk = 70}).on(h200());
  EXPECT_EQ(pl.kernel, Kernel::simt);
  EXPECT_EQ(pl.dqk, 100);
  EXPECT_EQ(pl.dv, 40);
  EXPECT_EQ(pl.m, 8);
  EXPECT_EQ(pl.n, 32);
  EXPECT_EQ(pl.smem, 24832);
  EXPECT_TRUE(pl.pack_gqa);  // 5 rows < 8, group 3
  EXPECT_EQ(pl.rows, 15);
  EXPECT_EQ(pl.grid.x, 2);
  EXPECT_EQ(pl.grid.y, 2);
  // Decode, one kv head of 8: 1 CTA, 528 slots (4 CTAs / SM by registers): 109 splits, the first
  // within 85% of 128 (the cap); 782 128-key blocks allow 391.
  const Plan dec = Planned({.dtype = DType::float32, .hq = 8, .hkv = 1, .sq = 1, .sk = 100000}).on(h200());
  EXPECT_EQ(dec.splits, 109);
  EXPECT_EQ(dec.workspace, size_t{109} * 1 * 8 * (128 + 1) * 4);
}

TEST(CudaPlan, KernelPreferenceAppliesWhereTheKernelSupportsTheProblem) {
  // 8 query tiles of 128 rows: the automatic choice is sm90 where it splits keys itself
  // (FA4_SM90_DECODE), else sm80 (its split-KV spreads so few tiles over the SMs).
  const Kernel auto_bf16 = FA4_SM90_DECODE ? Kernel::sm90 : Kernel::sm80;
  const Planned bf16({.hq = 4, .hkv = 4, .sq = 256, .sk = 256});
  const Planned f32({.dtype = DType::float32, .hq = 4, .hkv = 4, .sq = 256, .sk = 256});
  DeviceLimits dl = h200();  // (prefers sm80)
  EXPECT_EQ(bf16.on(dl).kernel, Kernel::sm80);
  EXPECT_EQ(f32.on(dl).kernel, Kernel::simt);
  dl.prefer = Kernel::sm80;  // f32 has no sm80 instance: the automatic choice
  EXPECT_EQ(bf16.on(dl).kernel, Kernel::sm80);
  EXPECT_EQ(f32.on(dl).kernel, Kernel::simt);
  dl.prefer = Kernel::simt;  // the simt kernel takes fp32 only: the automatic choice
  EXPECT_EQ(bf16.on(dl).kernel, auto_bf16);
  dl.prefer = Kernel::sm90;  // 8 CTAs; 256 keys = 2 key tiles: too few to split (>= 2 per split)
  EXPECT_TRUE(fa4::cuda::sm90_supports(bf16.problem(), dl));
  EXPECT_EQ(bf16.on(dl).kernel, Kernel::sm90);
  EXPECT_EQ(bf16.on(dl).splits, 1);
  EXPECT_EQ(f32.on(dl).kernel, Kernel::simt);
  dl.prefer.reset();
  EXPECT_EQ(bf16.on(dl).kernel, auto_bf16);
}

// sm90 (src/cuda/sm90/fwd_config.h): D = 64: 192 query rows (three consumers) x 128 keys, 3 K/V
// stages; D = 128: 128 x 128, 2 stages; D = 256: 128 x 64, 2 stages; smem = (M x D + stages x N x
// 2D) x 2 B + 1 KB barriers + 1 KB slack, + M x D x 2 B of O staging where that fits in 227 KB.
TEST(CudaPlan, Sm90TakesPrefillThatFillsTheGpu) {
  const Plan pl = Planned({.batch = 2, .hq = 16, .hkv = 16, .sq = 4096, .sk = 4096}).on(h200_auto());
  EXPECT_EQ(pl.kernel, Kernel::sm90);
  EXPECT_EQ(pl.m, 128);
  EXPECT_EQ(pl.n, 128);
  EXPECT_EQ(pl.smem, (128 * 128 + 2 * 128 * 256) * 2 + 2048 + 128 * 128 * 2);
  EXPECT_FALSE(pl.pack_gqa);
  EXPECT_EQ(pl.grid.x, 32);
  EXPECT_EQ(pl.grid.y, 16);
  EXPECT_EQ(pl.grid.z, 2);
  EXPECT_EQ(pl.splits, 1);
  // (1024 tiles on 132 SMs: the balanced walk's piece states, where it is built in)
  EXPECT_EQ(pl.workspace, FA4_SM90_BALANCED ? size_t{132} * 2 * 2 * (64 + 4) * 128 * 4 : 0u);
  auto tile = [](int64_t d) {
    const Plan p = Planned({.batch = 8, .hq = 16, .hkv = 16, .dqk = d, .dv = d, .sq = 1024, .sk = 1024}).on(h200_auto());
    return std::make_tuple(p.kernel, p.dqk, p.n, p.smem);
  };
  EXPECT_EQ(tile(64), std::make_tuple(Kernel::sm90, 64, 128, (192 * 64 + 3 * 128 * 128) * 2 + 2048 + 192 * 64 * 2));
  EXPECT_EQ(tile(96), std::make_tuple(Kernel::sm90, 128, 128, (128 * 128 + 2 * 128 * 256) * 2 + 2048 + 128 * 128 * 2));
  // (D 256 unmasked from 1024 keys: the 80-key long_keys tile, Sm90TilePerProblem)
  EXPECT_EQ(tile(256), std::make_tuple(Kernel::sm90, 256, 80, (128 * 256 + 2 * 80 * 512) * 2 + 2048));
  EXPECT_EQ(Planned({.batch = 8, .hq = 16, .hkv = 16, .dqk = 64, .dv = 64, .sq = 1024, .sk = 1024}).on(h200_auto()).m, 192);
  // (192, 128) (MLA prefill): its own instance, 128 x 128 tiles, O staged in Q
  const Plan mla = Planned({.batch = 8, .hq = 16, .hkv = 16, .dqk = 192, .dv = 128, .sq = 1024, .sk = 1024}).on(h200_auto());
  EXPECT_EQ(std::make_tuple(mla.kernel, mla.dqk, mla.dv, mla.n, mla.smem),
            std::make_tuple(Kernel::sm90, 192, 128, 128, (128 * 192 + 2 * 128 * 320) * 2 + 2048));
  // GQA prefill: one CTA per query head, K/V of its kv head.
  const Plan gqa = Planned({.batch = 4, .hq = 32, .hkv = 8, .sq = 1024, .sk = 1024}).on(h200_auto());
  EXPECT_EQ(gqa.kernel, Kernel::sm90);
  EXPECT_EQ(gqa.grid.y, 32);
}

// The sm90 tile per problem (sm90/fwd_config.h Tile): two consumers at D = 64 for masked
// sequences of <= 1024 query rows, 80-key tiles at D = 256 from 1024 keys (masked: 2048), P double-buffered at
// D = 128 unmasked from 4096 keys; each tile's shared memory as its instance lays it out.
TEST(CudaPlan, Sm90TilePerProblem) {
  using fa4::cuda::sm90::Tile;
  auto plan = [](int64_t d, int64_t s, bool causal, int64_t window_right = -1) {
    return Planned({.batch = 16384 / s, .hq = 2048 / d, .hkv = 2048 / d, .dqk = d, .dv = d, .sq = s, .sk = s,
                    .causal = causal, .window_right = window_right})
        .on(h200_auto());
  };
  const Plan short64 = plan(64, 1024, true);
  EXPECT_EQ(std::make_tuple(short64.kernel, short64.sm90_tile, short64.m, short64.n, short64.smem),
            std::make_tuple(Kernel::sm90, Tile::short_masked, 128, 128, (128 * 64 + 3 * 128 * 128) * 2 + 2048 + 128 * 64 * 2));
  EXPECT_EQ(plan(64, 512, false, 0).sm90_tile, Tile::short_masked);  // a window masks too
  EXPECT_EQ(plan(64, 2048, true).sm90_tile, Tile::standard);
  EXPECT_EQ(plan(64, 1024, false).sm90_tile, Tile::standard);
  EXPECT_EQ(plan(64, 2048, true).m, 192);
  const Plan long256 = plan(256, 4096, false);
  EXPECT_EQ(std::make_tuple(long256.sm90_tile, long256.m, long256.n, long256.smem),
            std::make_tuple(Tile::long_keys, 128, 80, (128 * 256 + 2 * 80 * 512) * 2 + 2048));
  EXPECT_EQ(plan(256, 8192, true).sm90_tile, Tile::long_keys);
  EXPECT_EQ(plan(256, 2048, true).sm90_tile, Tile::long_keys);
  EXPECT_EQ(plan(256, 1024, true).sm90_tile, Tile::standard);
  EXPECT_EQ(plan(256, 1024, false).sm90_tile, Tile::long_keys);
  EXPECT_EQ(plan(256, 512, false).sm90_tile, Tile::standard);
  EXPECT_EQ(plan(128, 1024, true).sm90_tile, Tile::standard);
  // D 128 unmasked from 4096 keys: the long_keys tile (P double-buffered), the standard tile's
  // shape and shared memory; masked, shorter or decode-sized problems keep the standard tile.
  // (Builds of the balanced walk keep the standard tile there, and walk it balanced: 2048 tiles
  // on 132 SMs.)
  const Tile long_tile = FA4_SM90_BALANCED ? Tile::balanced : Tile::long_keys;
  const Plan long128 = plan(128, 8192, false);
  EXPECT_EQ(std::make_tuple(long128.sm90_tile, long128.m, long128.n), std::make_tuple(long_tile, 128, 128));
  EXPECT_EQ(long128.smem, plan(128, 8192, true).smem);
  EXPECT_EQ(plan(128, 4096, false).sm90_tile, long_tile);
  EXPECT_EQ(plan(128, 2048, false).sm90_tile, FA4_SM90_BALANCED ? Tile::balanced : Tile::standard);
  EXPECT_EQ(plan(128, 8192, true).sm90_tile, Tile::standard);
  EXPECT_EQ(plan(128, 8192, false, 0).sm90_tile, Tile::standard);  // a window masks
  const Plan dec128 = Planned({.batch = 32, .hq = 32, .hkv = 8, .dqk = 128, .dv = 128, .sq = 1, .sk = 16384}).on(h200_auto());
  EXPECT_NE(dec128.sm90_tile, Tile::long_keys);
  // The device tests' shapes (test_cuda LongKeysUnmaskedPrefill) run it unsplit, automatic and
  // forced sm90 alike (fewer query tiles than SMs would split: the split_kv tile).
  DeviceLimits forced = h200_auto();
  forced.prefer = Kernel::sm90;
  for (const DeviceLimits& dl : {h200_auto(), forced})
    for (auto [hq, sq] : {std::pair<int64_t, int64_t>{8, 1700}, {16, 1100}}) {
      const Plan t = Planned({.batch = 1, .hq = hq, .hkv = 2, .dqk = 128, .dv = 128, .sq = sq, .sk = 4500}).on(dl);
      EXPECT_EQ(std::make_tuple(t.kernel, t.sm90_tile, t.splits),
                std::make_tuple(Kernel::sm90, FA4_SM90_BALANCED ? Tile::standard : Tile::long_keys, 1))
          << hq << " heads, " << sq << " rows";
    }
  EXPECT_EQ(fa4::cuda::sm90::has_tile(Tile::balanced, 128, 128), FA4_SM90_BALANCED != 0);
  EXPECT_FALSE(fa4::cuda::sm90::has_tile(Tile::balanced, 64, 64));
  for (auto [t, dqk, dv] : {std::tuple{Tile::short_masked, 64, 64}, std::tuple{Tile::long_keys, 256, 256}}) {
    EXPECT_TRUE(fa4::cuda::sm90::has_tile(t, dqk, dv));
    EXPECT_LE(fa4::cuda::sm90::smem_bytes(dqk, dv, t), fa4::cuda::sm90::kSmemLimit);
  }
  EXPECT_FALSE(fa4::cuda::sm90::has_tile(Tile::short_masked, 128, 128));
  EXPECT_TRUE(fa4::cuda::sm90::has_tile(Tile::long_keys, 128, 128));
  EXPECT_FALSE(fa4::cuda::sm90::has_tile(Tile::long_keys, 64, 64));
  EXPECT_FALSE(fa4::cuda::sm90::has_tile(Tile::long_keys, 192, 128));
  // Split-KV launches run the instance that merges its own splits: D 128's and D 256's have the
  // standard tile's shape and shared memory, D 64's two consumers (short_masked's shape); the
  // (192, 128) pair has none. D 64 takes its split_kv tile at every row count, D 256 at <= 8 rows
  // per tile (sm90::split_kv_pays, measured), or always with FA4_SM90_SPLIT_KV_ALL_DIMS.
  using fa4::cuda::sm90::tile_cfg;
  for (int d : {64, 128, 256}) {
    EXPECT_TRUE(fa4::cuda::sm90::has_tile(Tile::split_kv, d, d)) << d;
    EXPECT_LE(fa4::cuda::sm90::smem_bytes(d, d, Tile::split_kv), fa4::cuda::sm90::kSmemLimit) << d;
  }
  EXPECT_FALSE(fa4::cuda::sm90::has_tile(Tile::split_kv, 192, 128));
  EXPECT_FALSE(fa4::cuda::sm90::has_tile(Tile::split_kv, 64, 128));
  EXPECT_EQ(fa4::cuda::sm90::smem_bytes(128, 128, Tile::split_kv), fa4::cuda::sm90::smem_bytes(128, 128, Tile::standard));
  EXPECT_EQ(fa4::cuda::sm90::smem_bytes(256, 256, Tile::split_kv), fa4::cuda::sm90::smem_bytes(256, 256, Tile::standard));
  EXPECT_EQ(tile_cfg(64, 64, Tile::split_kv).block_m(), tile_cfg(64, 64, Tile::short_masked).block_m());
  EXPECT_EQ(tile_cfg(64, 64, Tile::split_kv).block_n, tile_cfg(64, 64, Tile::standard).block_n);
  // B 1 decode, 32/8 (PackGQA: sq x 4 rows per kv head).
  auto decode = [](int64_t d, int32_t splits, int64_t sq = 1) {
    return Planned({.batch = 1, .hq = 32, .hkv = 8, .dqk = d, .dv = d, .sq = sq, .sk = 8192, .num_splits = splits})
        .on(h200_auto());
  };
  const Plan split128 = decode(128, 0);
  EXPECT_EQ(split128.kernel, Kernel::sm90);
  EXPECT_GT(split128.splits, 1);
  EXPECT_EQ(std::make_tuple(split128.sm90_tile, split128.m, split128.n),
            std::make_tuple(FA4_SM90_FUSED_COMBINE ? Tile::split_kv : Tile::standard, 128, 128));
  EXPECT_EQ(decode(128, 1).sm90_tile, Tile::standard);  // one split: nothing to merge
  // (d, sq): rows 4 / 16 / 32; whether the split_kv tile runs.
  for (auto [d, sq, takes] : {std::tuple{64, 1, true}, std::tuple{64, 8, true}, std::tuple{256, 1, true},
                              std::tuple{256, 2, true}, std::tuple{256, 4, bool(FA4_SM90_SPLIT_KV_ALL_DIMS)},
                              std::tuple{256, 8, bool(FA4_SM90_SPLIT_KV_ALL_DIMS)}}) {
    const Plan pl = decode(d, 0, sq);
    EXPECT_EQ(pl.kernel, Kernel::sm90) << d << " " << sq;
    EXPECT_GT(pl.splits, 1) << d << " " << sq;
    EXPECT_EQ(pl.rows, sq * 4) << d << " " << sq;
    if (FA4_SM90_FUSED_COMBINE && takes) {
      // Planned on the split_kv tile: 128 rows (D 64: two consumers, not the standard three).
      EXPECT_EQ(std::make_tuple(pl.sm90_tile, pl.m, pl.n),
                std::make_tuple(Tile::split_kv, 128, tile_cfg(d, d, Tile::split_kv).block_n)) << d << " " << sq;
    } else {
      EXPECT_NE(pl.sm90_tile, Tile::split_kv) << d << " " << sq;
    }
  }
  static_assert(fa4::cuda::sm90::split_kv_pays(64, 1 << 20) && fa4::cuda::sm90::split_kv_pays(128, 1 << 20));
  static_assert(fa4::cuda::sm90::split_kv_pays(256, 8));
  static_assert(!fa4::cuda::sm90::split_kv_pays(192, 1));
}

// Persistent CTAs: at most one per SM, walking the tile grid; a causal schedule groups the
// (head, batch) pairs whose K / V fit half the L2, heads of a KV head together.
TEST(CudaPlan, Sm90PersistentSchedule) {
  DeviceLimits dl = h200_auto();
  dl.l2_bytes = 50 << 20;
  const Plan pl = Planned({.batch = 2, .hq = 16, .hkv = 16, .sq = 4096, .sk = 4096}).on(dl);
  EXPECT_EQ(pl.sched.gx, 32);
  EXPECT_EQ(pl.sched.gy, 16);
  EXPECT_EQ(pl.sched.gz, 2);
  EXPECT_EQ(pl.sched.section, 1);
  EXPECT_EQ(pl.ctas, 132);
  // Dense causal (FA4_SM90_MASKED_LPT): heaviest tiles first, CTAs snaking, over all 32 (head,
  // batch) pairs or an L2-sized section (<= 12 pairs of 2 MB K / V in 25 MB) dividing the CTAs
  // where the model balances it (Sm90LongCausalTakesAnL2SectionWhereItBalances).
  // (The model finds such a section here, so the static walk stays: Sm90LongMaskedWalkDynamically.)
  const bool dyn = fa4::cuda::sm90::dynamic_walk(128);
  const Plan causal = Planned({.batch = 2, .hq = 16, .hkv = 16, .sq = 4096, .sk = 4096, .causal = true}).on(dl);
  EXPECT_TRUE(causal.sched.section == 32 || (causal.sched.section <= 12 && 132 % causal.sched.section == 0))
      << causal.sched.section;
  EXPECT_EQ(causal.sched.snake, 1);
  EXPECT_EQ(causal.sched.dynamic, 0);
  EXPECT_EQ(causal.ctas, 132);
  EXPECT_EQ(pl.sched.dynamic, 0) << "no mask: every tile costs the same, the static walk";
  EXPECT_EQ(pl.sched.snake, 0);
  // Short causal sequences (8 query tiles each <= kMaxPersistentMaskedTiles): at most L2-sized
  // sections (K / V of one pair = 1024 keys x 256 x 2 B = 512 KB -> 50 pairs in 25 MB),
  // persistent, in the static order the makespan model balances best (Sm90BalancedStaticOrder).
  const Plan short_causal = Planned({.batch = 16, .hq = 16, .hkv = 16, .sq = 1024, .sk = 1024, .causal = true}).on(dl);
  EXPECT_LE(short_causal.sched.section, 50);
  EXPECT_EQ(short_causal.ctas, 132);
  EXPECT_EQ(short_causal.sched.dynamic, 0);
  EXPECT_EQ(short_causal.sched.heavy_x, 0);
  // Varlen causal: K / V of one (kv head, sequence) = 4096 keys x 256 x 2 B = 2 MB -> 12 pairs in
  // 25 MB, x4 with GQA 4 (clamped to the 16 heads); its virtual grid (all sequences' tiles, > 16)
  // runs persistent on the dynamic walk (one phase: the host does not know the tiles' costs),
  // else one CTA per tile.
  const Plan vl = Planned({.batch = 2, .hq = 16, .hkv = 4, .sq = 4096, .sk = 4096, .varlen = true, .total_q = 8192,
                           .causal = true})
                      .on(dl);
  EXPECT_EQ(vl.kernel, Kernel::sm90);
  EXPECT_EQ(vl.sched.section, 16);
  EXPECT_EQ(vl.sched.snake, 0);
  EXPECT_EQ(vl.sched.heavy_x, 0);
  EXPECT_EQ(vl.sched.dynamic, dyn ? 1 : 0);
  EXPECT_EQ(vl.ctas, dyn ? 132 : vl.sched.total());
  // fewer tiles than SMs: one CTA per tile
  const Plan small = Planned({.batch = 1, .hq = 132, .hkv = 132, .sq = 128, .sk = 4096}).on(dl);
  EXPECT_EQ(small.kernel, Kernel::sm90);
  EXPECT_EQ(small.ctas, 132);
  DeviceLimits pref = dl;
  pref.prefer = Kernel::sm90;  // (without FA4_SM90_DECODE the automatic choice is sm80's split-KV)
  const Plan one = Planned({.batch = 1, .hq = 2, .hkv = 2, .sq = 4096, .sk = 4096}).on(pref);
  EXPECT_EQ(one.kernel, Kernel::sm90);
  // 64 tiles on 132 SMs: (FA4_SM90_DECODE) 2 splits of 16 key tiles, 128 tiles and CTAs.
  EXPECT_EQ(one.splits, FA4_SM90_DECODE ? 2 : 1);
  EXPECT_EQ(one.sched.total(), 64 * one.splits);
  EXPECT_EQ(one.ctas, 64 * one.splits);
}

// The schedule visits every tile of the virtual grid exactly once, sections of `section` (y, z)
// pairs one after the other, x slowest inside a section.
TEST(TileSchedule, EveryTileOnceInSectionOrder) {
  for (const fa4::cuda::TileSchedule s : {fa4::cuda::TileSchedule{5, 3, 2, 1}, fa4::cuda::TileSchedule{4, 7, 3, 5},
                                          fa4::cuda::TileSchedule{1, 1, 1, 1}, fa4::cuda::TileSchedule{3, 4, 1, 4},
                                          fa4::cuda::TileSchedule{6, 5, 5, 25}}) {
    std::vector<int> seen(static_cast<size_t>(s.total()), 0);
    int64_t prev_sec = -1;
    int prev_x = -1;
    for (int64_t t = 0; t < s.total(); ++t) {
      int x, y, z;
      s.coords(t, &x, &y, &z);
      ASSERT_TRUE(x >= 0 && x < s.gx && y >= 0 && y < s.gy && z >= 0 && z < s.gz) << t;
      ++seen[static_cast<size_t>((z * s.gy + y) * s.gx + x)];
      const int64_t sec = (z * s.gy + y) / s.section;
      EXPECT_GE(sec, prev_sec) << "sections in order";
      if (sec == prev_sec) {
        EXPECT_GE(x, prev_x) << "x slowest inside a section";
      }
      prev_sec = sec, prev_x = x;
    }
    for (int v : seen) EXPECT_EQ(v, 1);
  }
}

// coords() takes 32-bit arithmetic below 2^31 tiles (a 64-bit division is a slow subroutine on
// the GPU) and 64-bit above: both give the 64-bit map, also for grids near and past 2^31.
TEST(TileSchedule, NarrowCoordsMatchTheWideOnes) {
  std::mt19937_64 rng(7);
  const fa4::cuda::TileSchedule fixed[] = {{5, 3, 2, 1}, {4, 7, 3, 5}, {6, 5, 5, 25}, {1 << 20, 1 << 10, 2, 3},
                                           {(1 << 21) - 1, 1023, 1, 7}, {1 << 22, 1 << 10, 1, 1}};
  for (int k = 0; k < 200; ++k) {
    fa4::cuda::TileSchedule s = k < 6 ? fixed[k] : fa4::cuda::TileSchedule{};
    if (k >= 6) {
      s.gx = 1 + static_cast<int64_t>(rng() % 5000), s.gy = 1 + static_cast<int64_t>(rng() % 300),
      s.gz = 1 + static_cast<int64_t>(rng() % 300);
      s.section = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(s.gy * s.gz));
    }
    for (int i = 0; i < 2000; ++i) {
      const int64_t t = i < 4 ? (i < 2 ? i : s.total() - 1 - (i - 2)) : static_cast<int64_t>(rng() % static_cast<uint64_t>(s.total()));
      int x, y, z, xw, yw, zw;
      s.coords(t, &x, &y, &z);
      s.coords_as<int64_t>(t, &xw, &yw, &zw);
      ASSERT_TRUE(x == xw && y == yw && z == zw) << "schedule " << k << " tile " << t;
      ASSERT_TRUE(x >= 0 && x < s.gx && y >= 0 && y < s.gy && z >= 0 && z < s.gz) << t;
    }
  }
}

// static_makespan is the largest per-CTA sum of tile costs over the deal of tile_for / coords.
TEST(TileSchedule, StaticMakespanIsTheDealOfTileFor) {
  std::mt19937_64 rng(3);
  for (int k = 0; k < 300; ++k) {
    fa4::cuda::TileSchedule s;
    s.gx = 1 + static_cast<int64_t>(rng() % 17), s.gy = 1 + static_cast<int64_t>(rng() % 40),
    s.gz = 1 + static_cast<int64_t>(rng() % 9);
    s.section = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(s.gy * s.gz));
    s.snake = static_cast<int32_t>(rng() % 2);
    const int64_t ctas = 1 + static_cast<int64_t>(rng() % 140);
    std::vector<int64_t> cost(static_cast<size_t>(s.gx));
    for (auto& c : cost) c = 1 + static_cast<int64_t>(rng() % 20);
    std::vector<int64_t> load(static_cast<size_t>(ctas), 0);
    for (int64_t r = 0; r < s.rounds(ctas); ++r)
      for (int64_t b = 0; b < ctas; ++b) {
        const int64_t t = s.tile_for(r, b, ctas);
        if (t < 0) continue;
        int x, y, z;
        s.coords(t, &x, &y, &z);
        load[static_cast<size_t>(b)] += cost[static_cast<size_t>(x)];
      }
    EXPECT_EQ(fa4::cuda::static_makespan(s, ctas, cost), *std::max_element(load.begin(), load.end())) << k;
  }
}

// Short causal sequences on an H200 (132 SMs, 60 MB L2): the planner's static order is never worse
// than the L2-sized round robin in its own model, stays within the L2-sized section, and comes
// within 3 % of an even split of the work, where the round robin was 5-18 % over (the measured
// per-CTA key tiles of bench/sm90_trace.py matched this model exactly; plan.cpp).
TEST(CudaPlan, Sm90BalancedStaticOrder) {
  DeviceLimits dl = h200_auto();
  dl.l2_bytes = 60 << 20;
  struct Case {
    int64_t d, s, batch, h;
  };
  for (const Case c : {Case{128, 1024, 16, 16}, Case{128, 2048, 8, 16}, Case{64, 2048, 8, 32}, Case{256, 2048, 8, 8},
                       Case{64, 1024, 16, 32}, Case{128, 512, 32, 16}, Case{64, 512, 32, 32}}) {
    const Plan pl = Planned({.batch = c.batch, .hq = c.h, .hkv = c.h, .dqk = c.d, .dv = c.d, .sq = c.s, .sk = c.s, .causal = true})
                        .on(dl);
    ASSERT_EQ(pl.kernel, Kernel::sm90);
    ASSERT_EQ(pl.ctas, 132);
    const int64_t gx = pl.sched.gx;
    std::vector<int64_t> cost(static_cast<size_t>(gx));
    int64_t work = 0;
    for (int64_t x = 0; x < gx; ++x) {  // causal: x = 0 is the last (heaviest) query tile
      const int64_t rows_end = std::min((gx - x) * pl.m, c.s);
      cost[static_cast<size_t>(x)] = (rows_end + pl.n - 1) / pl.n + 2;
      work += cost[static_cast<size_t>(x)] * pl.sched.gy * pl.sched.gz;
    }
    const int64_t l2_section = std::min<int64_t>((60 << 20) / 2 / (c.s * 4 * c.d), c.batch * c.h);
    fa4::cuda::TileSchedule rr = pl.sched;
    rr.section = l2_section, rr.snake = 0;
    const int64_t span = fa4::cuda::static_makespan(pl.sched, pl.ctas, cost);
    EXPECT_LE(pl.sched.section, l2_section) << c.d << " " << c.s;
    EXPECT_LE(span, fa4::cuda::static_makespan(rr, pl.ctas, cost)) << c.d << " " << c.s;
    EXPECT_LE(static_cast<double>(span), 1.03 * static_cast<double>(work) / 132.0) << c.d << " " << c.s;
  }
}

// Long causal sequences (> 16 query tiles) on the static walk (D 64: no dynamic walk): the global
// snake, unless an L2-sized section (a divisor of the CTA count) balances within 2 % of an even
// split in the model -- S 4k over 128 pairs does (<= 30 pairs of 1 MB K / V in 30 MB), S 16k
// over 16 does not (7 pairs per section).
TEST(CudaPlan, Sm90LongCausalTakesAnL2SectionWhereItBalances) {
  DeviceLimits dl = h200_auto();
  dl.l2_bytes = 60 << 20;
  const Plan s4k =
      Planned({.batch = 8, .hq = 16, .hkv = 16, .dqk = 64, .dv = 64, .sq = 4096, .sk = 4096, .causal = true}).on(dl);
  ASSERT_EQ(s4k.kernel, Kernel::sm90);
  EXPECT_EQ(s4k.sched.dynamic, 0);
  EXPECT_LE(s4k.sched.section, 30);
  EXPECT_EQ(132 % s4k.sched.section, 0);
  const int64_t gx = s4k.sched.gx;
  std::vector<int64_t> cost(static_cast<size_t>(gx));
  int64_t work = 0;
  for (int64_t x = 0; x < gx; ++x) {  // x = 0: the last (heaviest) query tile
    const int64_t rows_end = std::min((gx - x) * s4k.m, int64_t{4096});
    cost[static_cast<size_t>(x)] = (rows_end + s4k.n - 1) / s4k.n + 2;
    work += cost[static_cast<size_t>(x)] * 128;
  }
  EXPECT_LE(static_cast<double>(fa4::cuda::static_makespan(s4k.sched, s4k.ctas, cost)), 1.02 * static_cast<double>(work) / 132.0);
  const Plan s16k =
      Planned({.batch = 1, .hq = 16, .hkv = 16, .dqk = 64, .dv = 64, .sq = 16384, .sk = 16384, .causal = true}).on(dl);
  EXPECT_EQ(s16k.sched.section, 16);
  EXPECT_EQ(s16k.sched.snake, 1);
}

// Two phases: every tile exactly once; first the heavy x < heavy_x in sections of `section`
// pairs (x slowest inside), then the rest as one section of every pair; the 32- and 64-bit maps
// agree.
TEST(TileSchedule, TwoPhasesCoverEveryTileOnce) {
  std::mt19937_64 rng(11);
  for (int k = 0; k < 300; ++k) {
    fa4::cuda::TileSchedule s;
    s.gx = 2 + static_cast<int64_t>(rng() % 40), s.gy = 1 + static_cast<int64_t>(rng() % 20),
    s.gz = 1 + static_cast<int64_t>(rng() % 5);
    s.section = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(s.gy * s.gz));
    s.heavy_x = static_cast<int64_t>(rng() % static_cast<uint64_t>(s.gx));  // 0: one phase
    std::vector<int> seen(static_cast<size_t>(s.total()), 0);
    const int64_t heavy = s.heavy_x * s.gy * s.gz;
    int64_t prev_sec = -1;
    int prev_x = -1;
    for (int64_t t = 0; t < s.total(); ++t) {
      int x, y, z;
      s.coords_phased(t, &x, &y, &z);
      ASSERT_TRUE(x >= 0 && x < s.gx && y >= 0 && y < s.gy && z >= 0 && z < s.gz) << k << " " << t;
      ++seen[static_cast<size_t>((z * s.gy + y) * s.gx + x)];
      if (s.heavy_x == 0) {
        int x1, y1, z1;
        s.coords(t, &x1, &y1, &z1);
        ASSERT_TRUE(x == x1 && y == y1 && z == z1) << "one phase is the plain order";
        continue;
      }
      if (t < heavy) {
        ASSERT_LT(x, s.heavy_x) << k << " " << t;
        const int64_t sec = (z * s.gy + y) / s.section;
        EXPECT_GE(sec, prev_sec);
        if (sec == prev_sec) {
          EXPECT_GE(x, prev_x);
        }
        prev_sec = sec, prev_x = x;
      } else {
        ASSERT_GE(x, s.heavy_x) << k << " " << t;
        if (t > heavy) {
          EXPECT_GE(x, prev_x) << "the light phase: one section, x slowest";
        }
        prev_x = x;
      }
    }
    for (int v : seen) ASSERT_EQ(v, 1) << k;
  }
}

// Long masked problems walk dynamically on the instances that can (D > 64): D 128 / 256 dense
// causal in two phases (65 % of each sequence's query tiles heavy), varlen causal in one; D 64,
// short causal and unmasked problems keep the static walk.
TEST(CudaPlan, Sm90LongMaskedWalkDynamically) {
  if (!fa4::cuda::sm90::dynamic_walk(128)) GTEST_SKIP() << "built with FA4_SM90_DYNAMIC=0";
  DeviceLimits dl = h200_auto();
  dl.l2_bytes = 60 << 20;
  for (int64_t d : {128, 256}) {  // 32 / 16 pairs: no L2-sized section balances (the global snake)
    const Plan pl = Planned({.batch = 2, .hq = 2048 / d, .hkv = 2048 / d, .dqk = d, .dv = d, .sq = 8192, .sk = 8192,
                             .causal = true}).on(dl);
    ASSERT_EQ(pl.kernel, Kernel::sm90);
    EXPECT_EQ(pl.sched.dynamic, 1) << d;
    EXPECT_EQ(pl.sched.gx, 64) << d;
    EXPECT_EQ(pl.sched.heavy_x, 64 * FA4_SM90_HEAVY_PCT / 100) << d;  // the heaviest 65 %: 41 tiles
    // K / V of one pair: 8192 keys x 2d x 2 B; half the L2 holds 30 MB of them
    EXPECT_EQ(pl.sched.section, (30 << 20) / (8192 * 4 * d)) << d;
    EXPECT_EQ(pl.sched.snake, 0) << d;
    EXPECT_EQ(pl.ctas, 132);
    const Plan win = Planned({.batch = 2, .hq = 2048 / d, .hkv = 2048 / d, .dqk = d, .dv = d, .sq = 8192, .sk = 8192,
                              .window_right = 0}).on(dl);
    EXPECT_EQ(win.sched.dynamic, 1) << "a sliding window is a mask too";
  }
  // 64 pairs at 8k: a 6-pair section balances the static walk within 2 % in the model; it stays
  const Plan sec = Planned({.batch = 4, .hq = 16, .hkv = 16, .sq = 8192, .sk = 8192, .causal = true}).on(dl);
  EXPECT_EQ(sec.sched.dynamic, 0);
  EXPECT_LT(sec.sched.section, 64);
  EXPECT_EQ(Planned({.batch = 4, .hq = 16, .hkv = 16, .dqk = 64, .dv = 64, .sq = 8192, .sk = 8192, .causal = true})
                .on(dl).sched.dynamic, 0);
  EXPECT_EQ(Planned({.batch = 4, .hq = 16, .hkv = 16, .sq = 8192, .sk = 8192}).on(dl).sched.dynamic, 0);
  EXPECT_EQ(Planned({.batch = 16, .hq = 16, .hkv = 16, .sq = 1024, .sk = 1024, .causal = true}).on(dl).sched.dynamic, 0);
  const Plan vl = Planned({.batch = 16, .hq = 16, .hkv = 16, .sq = 1024, .sk = 1024, .varlen = true, .total_q = 16384,
                           .causal = true}).on(dl);
  ASSERT_EQ(vl.kernel, Kernel::sm90);
  EXPECT_EQ(vl.sched.dynamic, 1);
  EXPECT_EQ(vl.sched.heavy_x, 0);
  EXPECT_EQ(vl.ctas, 132);
  EXPECT_LT(vl.sched.total() + 132, int64_t{1} << 31);
  // D 64 varlen causal, sequences <= 1k: the two-consumer short_masked tile, dynamic where that
  // instance has the walk (FA4_SM90_DYNAMIC_SHORT_D64), else one CTA per tile
  const Plan v64 = Planned({.batch = 16, .hq = 16, .hkv = 16, .dqk = 64, .dv = 64, .sq = 1024, .sk = 1024, .varlen = true,
                            .total_q = 16384, .causal = true}).on(dl);
  ASSERT_EQ(v64.kernel, Kernel::sm90);
  EXPECT_EQ(v64.sm90_tile, fa4::cuda::sm90::Tile::short_masked);
  const bool dyn64 = fa4::cuda::sm90::dynamic_walk(64, fa4::cuda::sm90::Tile::short_masked);
  EXPECT_EQ(v64.sched.dynamic, dyn64 ? 1 : 0);
  EXPECT_EQ(v64.ctas, dyn64 ? 132 : v64.sched.total());
}

// Device-resident varlen lengths leave the planner the tensor bounds (every packed token one
// sequence); the caller's max_seqlen_q / k hints then choose the tile, where smaller than those
// bounds. Lengths read on the host are exact and win over any hint.
TEST(CudaPlan, Sm90TileFromTheLengthHints) {
  using fa4::cuda::sm90::Tile;
  // 64 sequences of 256 tokens, D 64 causal: packed 16384 rows bound each sequence
  auto v64 = [](int64_t hint, bool host = false) {
    return Planned({.batch = 64, .hq = 32, .hkv = 32, .dqk = 64, .dv = 64, .sq = host ? 256 : 16384, .sk = 16384,
                    .varlen = true, .total_q = 16384, .causal = true, .max_seqlen_q = hint, .host_lengths = host})
        .on(h200_auto());
  };
  EXPECT_EQ(v64(0).sm90_tile, Tile::standard);  // nothing known: a 16384-row sequence may be there
  EXPECT_EQ(v64(256).sm90_tile, Tile::short_masked);
  EXPECT_EQ(v64(256).m, 128);
  EXPECT_EQ(v64(1024).sm90_tile, Tile::short_masked);
  EXPECT_EQ(v64(1025).sm90_tile, Tile::standard);
  EXPECT_EQ(v64(int64_t{1} << 40).sm90_tile, Tile::standard);  // a hint past the bound is no information
  EXPECT_EQ(v64(0, true).sm90_tile, Tile::short_masked);       // read on the host: 256 rows
  // D 256 (unmasked): 80-key tiles from 1024 keys; a 512 hint under a 16k key bound keeps the 64-key tile
  auto v256 = [](int64_t hint_k, bool host = false) {
    return Planned({.batch = 16, .hq = 8, .hkv = 8, .dqk = 256, .dv = 256, .sq = 1024, .sk = host ? 1024 : 16384,
                    .varlen = true, .total_q = 16384, .max_seqlen_k = hint_k, .host_lengths = host})
        .on(h200_auto());
  };
  EXPECT_EQ(v256(0).sm90_tile, Tile::long_keys);
  EXPECT_EQ(v256(512).sm90_tile, Tile::standard);
  EXPECT_EQ(v256(1024).sm90_tile, Tile::long_keys);
  EXPECT_EQ(v256(8192).sm90_tile, Tile::long_keys);
  // host-read lengths: the hint is ignored either way (512 keys are exact)
  EXPECT_EQ(Planned({.batch = 16, .hq = 8, .hkv = 8, .dqk = 256, .dv = 256, .sq = 1024, .sk = 512, .varlen = true,
                     .total_q = 16384, .max_seqlen_k = 8192, .host_lengths = true})
                .on(h200_auto())
                .sm90_tile,
            Tile::standard);
  // a dense problem's max_sq is exact: a smaller hint does not change it
  EXPECT_EQ(Planned({.batch = 8, .hq = 32, .hkv = 32, .dqk = 64, .dv = 64, .sq = 2048, .sk = 2048, .causal = true,
                     .max_seqlen_q = 256})
                .on(h200_auto())
                .sm90_tile,
            Tile::standard);
}

// Persistent CTAs: over all rounds every tile goes to exactly one CTA, straight or snaking.
TEST(TileSchedule, RoundsCoverEveryTileOnce) {
  for (int snake = 0; snake < 2; ++snake)
    for (int64_t ctas : {1, 3, 7, 132}) {
      fa4::cuda::TileSchedule s{7, 5, 3, 15, snake};
      std::vector<int> seen(static_cast<size_t>(s.total()), 0);
      for (int64_t r = 0; r < s.rounds(ctas); ++r)
        for (int64_t b = 0; b < ctas; ++b) {
          const int64_t t = s.tile_for(r, b, ctas);
          if (t < 0) continue;
          ASSERT_LT(t, s.total());
          ++seen[static_cast<size_t>(t)];
          if (snake && (r & 1)) {
            EXPECT_EQ(t, r * ctas + ctas - 1 - b);
          }
        }
      for (int v : seen) EXPECT_EQ(v, 1);
    }
}

// The balanced walk (common/tile_schedule.h piece): whole rounds round-robin as tile_for deals
// them, then the remaining tiles' key tiles in equal contiguous shares (at most two pieces per
// CTA); every tile is covered exactly once, key by key; a cut tile's pieces are those pieces_of
// names, each at the slot the merge reads (2 c + the CTA's remainder step).
TEST(TileSchedule, BalancedWalkCoversEveryKeyOnceAndNamesEachTilesPieces) {
  for (int64_t n : {1, 4, 8, 26, 128})
    for (int64_t ctas : {2, 7, 132})
      for (int64_t tiles : {ctas + 1, 2 * ctas - 1, int64_t{2048}, 3 * ctas + 5, 5 * ctas + ctas / 2}) {
        fa4::cuda::TileSchedule s{tiles, 1, 1, 1, 0};
        s.balanced_n = n;
        const int64_t w = tiles / ctas, rem = tiles % ctas;
        if (rem == 0 || rem * n < ctas) continue;  // (the planner's rules: no empty share)
        std::vector<std::vector<int>> covered(static_cast<size_t>(tiles), std::vector<int>(static_cast<size_t>(n), 0));
        // (remainder tile -> the (cta, slot) of each of its pieces)
        std::vector<std::vector<std::pair<int64_t, int64_t>>> pieces(static_cast<size_t>(rem));
        int64_t rem_min = INT64_MAX, rem_max = 0;
        for (int64_t b = 0; b < ctas; ++b) {
          int64_t rem_work = 0;
          for (int64_t r = 0;; ++r) {
            int64_t t = -1, cut = -2;
            int lo = -1, hi = -1;
            if (!s.piece(r, b, ctas, &t, &lo, &hi, &cut)) break;
            ASSERT_LT(r, w + 2);
            ASSERT_LT(t, tiles);
            ASSERT_LE(0, lo);
            ASSERT_LT(lo, hi);
            ASSERT_LE(hi, n);
            if (r < w) {
              EXPECT_EQ(t, s.tile_for(r, b, ctas));  // the whole rounds as the round-robin deals them
              EXPECT_EQ(cut, -1);
            } else {
              rem_work += hi - lo;
              const int64_t rt = t - w * ctas;
              if (lo == 0 && hi == n) {
                EXPECT_EQ(cut, -1);
              } else {
                ASSERT_GE(cut, 0);
                EXPECT_EQ(cut / 2, rt);
                EXPECT_EQ(cut % 2, r - w);
                pieces[static_cast<size_t>(rt)].push_back({b, 2 * b + cut % 2});
              }
            }
            for (int k = lo; k < hi; ++k) ++covered[static_cast<size_t>(t)][static_cast<size_t>(k)];
          }
          rem_min = std::min(rem_min, rem_work), rem_max = std::max(rem_max, rem_work);
        }
        EXPECT_LE(rem_max - rem_min, 1) << "n " << n << " ctas " << ctas << " tiles " << tiles;  // equal shares
        for (const auto& keys : covered)
          for (int v : keys) ASSERT_EQ(v, 1) << "n " << n << " ctas " << ctas << " tiles " << tiles;
        for (int64_t rt = 0; rt < rem; ++rt) {
          const auto& ps = pieces[static_cast<size_t>(rt)];
          if (ps.empty()) continue;  // whole in one share
          uint32_t first = 0, count = 0;
          s.pieces_of(static_cast<uint32_t>(rt), static_cast<uint32_t>(ctas), &first, &count);
          ASSERT_EQ(count, ps.size()) << "tile " << rt;
          for (uint32_t i = 0; i < count; ++i) {
            EXPECT_EQ(ps[i].first, first + i);
            const uint32_t c = first + i;
            EXPECT_EQ(ps[i].second, 2 * c + (s.share_begin(c, static_cast<uint32_t>(ctas)) < rt * n ? 1 : 0));
          }
        }
      }
}

// The planner runs the balanced instance (FA4_SM90_BALANCED) only for unmasked dense D 128
// problems whose last round is partial and cut into shares of >= 4 key tiles, <= 4 pieces a tile;
// the workspace holds the pieces' states: [2 slots x ctas][2 consumers][Dv / 2 + 4][128] floats.
TEST(CudaPlan, Sm90BalancedWalkWhereTheLastRoundIsPartial) {
  using fa4::cuda::sm90::Tile;
  const Plan d128 = Planned({.batch = 1, .hq = 16, .hkv = 16, .sq = 16384, .sk = 16384}).on(h200_auto());
  ASSERT_EQ(d128.kernel, Kernel::sm90);
  ASSERT_EQ(d128.sched.total(), 2048);
  ASSERT_EQ(d128.ctas, 132);
  if (FA4_SM90_BALANCED) {
    EXPECT_EQ(d128.sm90_tile, Tile::balanced);
    EXPECT_EQ(d128.sched.balanced_n, 16384 / 128);
    EXPECT_EQ(d128.piece_state_offset, 0u);
    EXPECT_EQ(d128.workspace, size_t{132} * 2 * 2 * (64 + 4) * 128 * 4);
  } else {
    EXPECT_EQ(d128.sm90_tile, Tile::long_keys);  // (the default build's tile there: Sm90TilePerProblem)
    EXPECT_EQ(d128.sched.balanced_n, 0);
    EXPECT_EQ(d128.workspace, 0u);
  }
  auto walks = [](const Plan& pl) { return pl.sched.balanced_n > 0 || pl.sm90_tile == Tile::balanced; };
  // Not: a causal mask, a sliding window, whole rounds (132 x 16 tiles), another head dim.
  EXPECT_FALSE(walks(Planned({.batch = 1, .hq = 16, .hkv = 16, .sq = 16384, .sk = 16384, .causal = true}).on(h200_auto())));
  EXPECT_FALSE(walks(Planned({.batch = 1, .hq = 16, .hkv = 16, .sq = 16384, .sk = 16384, .window_right = 64}).on(h200_auto())));
  EXPECT_FALSE(walks(Planned({.batch = 1, .hq = 33, .hkv = 33, .sq = 8192, .sk = 8192}).on(h200_auto())));
  EXPECT_FALSE(walks(Planned({.batch = 1, .hq = 16, .hkv = 16, .dqk = 64, .dv = 64, .sq = 16384, .sk = 16384}).on(h200_auto())));
  // Nor a last round of 2 tiles (pieces of 64 a tile) or shares under 4 key tiles (1024 tiles x 1
  // key tile: 100 left over for 132 CTAs).
  EXPECT_FALSE(walks(Planned({.batch = 1, .hq = 2, .hkv = 2, .sq = 134 * 128, .sk = 4096}).on(h200_auto())));
  EXPECT_FALSE(walks(Planned({.batch = 8, .hq = 16, .hkv = 16, .sq = 1024, .sk = 100}).on(h200_auto())));
  // A ragged key count: every tile still has ceil(sk / 128) key tiles.
  const Plan ragged = Planned({.batch = 2, .hq = 16, .hkv = 16, .sq = 4000, .sk = 1000}).on(h200_auto());
  EXPECT_EQ(ragged.sched.balanced_n, FA4_SM90_BALANCED && ragged.kernel == Kernel::sm90 ? 8 : 0);
}

// Paged KV on sm90 (FA4_SM90_PAGED): only page sizes that are multiples of the tile's key block,
// so no key tile straddles two pages (the producer reads one page-table entry per key tile); the
// D = 256 80-key tile gives way to the 64-key one where 80 does not divide the page.
TEST(CudaPlan, Sm90PagedWholeKeyTilesPerPage) {
  using fa4::cuda::sm90::Tile;
  const Kernel on = FA4_SM90_PAGED || FA4_SM90_PAGED_GATHER ? Kernel::sm90 : Kernel::sm80;  // (or gathered)
  auto plan = [](int64_t d, int64_t page, int64_t sk) {
    return Planned({.batch = 4, .hq = 16, .hkv = 4, .dqk = d, .dv = d, .sq = 2048, .sk = sk, .paged = true, .page_size = page})
        .on(h200_auto());
  };
  EXPECT_EQ(plan(128, 256, 8192).kernel, on);
  EXPECT_EQ(plan(128, 128, 8192).kernel, on);
  EXPECT_EQ(plan(64, 128, 8192).kernel, on);
  // 64-row pages under 128-key tiles: one TMA box per page (FA4_SM90_PAGED_SUB); smaller pages
  // (below FA4_SM90_SUB_PAGE_MIN, or not dividing the key block) stay on sm80.
  const Kernel sub = (FA4_SM90_PAGED && FA4_SM90_PAGED_SUB && FA4_SM90_SUB_PAGE_MIN <= 64) || FA4_SM90_PAGED_GATHER
                         ? Kernel::sm90 : Kernel::sm80;
  EXPECT_EQ(plan(128, 64, 8192).kernel, sub);
  EXPECT_EQ(plan(64, 64, 8192).kernel, sub);
  // (FA4_SM90_PAGED_GATHER: the pages they do not take go to the gather instances instead,
  // Sm90GatherPagedCaches.)
  const Kernel gathered = FA4_SM90_PAGED_GATHER ? Kernel::sm90 : Kernel::sm80;
  EXPECT_EQ(plan(128, 48, 8192).kernel, gathered);  // does not divide 128
  if (FA4_SM90_SUB_PAGE_MIN > 16) {
    EXPECT_EQ(plan(128, 16, 8192).kernel, gathered);
  }
  if (FA4_SM90_SUB_PAGE_MIN > 32) {
    EXPECT_EQ(plan(256, 32, 8192).kernel, gathered);
  }
  EXPECT_EQ(plan(128, 1, 8192).kernel, gathered);
  const Plan d256 = plan(256, 256, 8192);  // dense keys this long take the 80-key tile
  EXPECT_EQ(d256.kernel, on);
  if (FA4_SM90_PAGED) {
    EXPECT_EQ(std::make_tuple(d256.sm90_tile, d256.n), std::make_tuple(Tile::standard, 64));
  }
  // 80-row pages: the 80-key tile fits them (long keys), the 64-key one does not (short keys).
  const Plan p80 = plan(256, 80, 8192);
  EXPECT_EQ(p80.kernel, on);
  if (FA4_SM90_PAGED && FA4_SM90_PAGED_GATHER < 2) {
    EXPECT_EQ(p80.sm90_tile, Tile::long_keys);
  }
  EXPECT_EQ(plan(256, 80, 512).kernel, gathered);
}

// Decode on the sm90 kernel (FA4_SM90_DECODE): PackGQA where the group divides 64 and packed
// tiles are fuller, split-KV over one persistent CTA per SM, and the decode shapes left to sm80.
TEST(CudaPlan, Sm90DecodePacksAndSplits) {
  if (!FA4_SM90_DECODE) GTEST_SKIP() << "built with FA4_SM90_DECODE=0: decode stays on sm80";
  // B 1, 32 / 8, one token, 8192 keys: 8 packed tiles of 4 rows (one per kv head); 64 key tiles of
  // 128 allow 32 splits; 8 s / 132 slots: s = 16 and 32 fill 97 %, the first count within 85 % of
  // that is 14 (112 CTAs, 85 %). Counted in key tiles (FA4_SM90_TILE_SPLITS): one wave holds 16
  // splits of 4 tiles (14 would run 5).
  const Plan dec = Planned({.hq = 32, .hkv = 8, .sq = 1, .sk = 8192}).on(h200_auto());
  const int s = FA4_SM90_TILE_SPLITS ? 16 : 14;
  EXPECT_EQ(dec.kernel, Kernel::sm90);
  EXPECT_TRUE(dec.pack_gqa);
  EXPECT_EQ(dec.rows, 4);
  EXPECT_EQ(dec.grid.x, 1);
  EXPECT_EQ(dec.grid.y, 8);
  EXPECT_EQ(dec.splits, s);
  EXPECT_EQ(dec.grid.z, s);
  EXPECT_EQ(dec.sched.total(), 8 * s);
  EXPECT_EQ(dec.ctas, 8 * s);
  EXPECT_EQ(dec.workspace, size_t(s) * 1 * 32 * (128 + 1) * 4);
  // Speculative decode, 4 tokens x group 16 = 64 rows: still one consumer's worth, packed.
  const Plan spec = Planned({.batch = 2, .hq = 128, .hkv = 8, .sq = 4, .sk = 4096, .causal = true}).on(h200_auto());
  EXPECT_EQ(spec.kernel, Kernel::sm90);
  EXPECT_TRUE(spec.pack_gqa);
  EXPECT_EQ(spec.rows, 64);
  EXPECT_GT(spec.splits, 1);
  // A group that does not divide 64 (3): no packed tile, so sm80's PackGQA decode tile.
  EXPECT_EQ(Planned({.hq = 24, .hkv = 8, .sq = 1, .sk = 8192}).on(h200_auto()).kernel, Kernel::sm80);
  // B 32: 256 packed tiles fill the SMs unsplit: sm80's decode tiles (measured 0.7-2 % ahead).
  EXPECT_EQ(Planned({.batch = 32, .hq = 32, .hkv = 8, .sq = 1, .sk = 8192}).on(h200_auto()).kernel, Kernel::sm80);
  // ... unless preferred: then sm90 packs and does not split (>= 80 % of the slots filled).
  DeviceLimits pref = h200_auto();
  pref.prefer = Kernel::sm90;
  const Plan b32 = Planned({.batch = 32, .hq = 32, .hkv = 8, .sq = 1, .sk = 8192}).on(pref);
  EXPECT_EQ(b32.kernel, Kernel::sm90);
  EXPECT_TRUE(b32.pack_gqa);
  EXPECT_EQ(b32.splits, 1);
  EXPECT_EQ(b32.ctas, 132);
  // Chunked prefill, B 4 x 32 heads x one 128-row tile = 128 tiles: sm90 (it took sm80's
  // split-KV before, at 0.52-0.56 of FA3), no pack (full tiles), no split (97 % of the slots).
  const Plan chunk = Planned({.batch = 4, .hq = 32, .hkv = 8, .sq = 128, .sk = 65536, .causal = true}).on(h200_auto());
  EXPECT_EQ(chunk.kernel, Kernel::sm90);
  EXPECT_FALSE(chunk.pack_gqa);
  EXPECT_EQ(chunk.splits, 1);
  // Forced splits are honoured on a prefill shape: grid.z = batch x splits.
  const Plan forced = Planned({.batch = 2, .hq = 16, .hkv = 16, .sq = 4096, .sk = 4096, .num_splits = 3}).on(h200_auto());
  EXPECT_EQ(forced.kernel, Kernel::sm90);
  EXPECT_EQ(forced.splits, 3);
  EXPECT_EQ(forced.grid.z, 6);
  EXPECT_EQ(forced.workspace, size_t{3} * 2 * 4096 * 16 * (128 + 1) * 4);
}

// FA4_SM90_PAGED_GATHER: paged caches whose pages the TMA loads do not take (1, 3, 16, 32 rows,
// sizes dividing nothing) run on the sm90 kernel's gather instances (sm90/fwd_gather.h): D 64 on the
// two-consumer tile, D 128 / 256 on the standard one (64 keys at D 256, never the 80-key tile), D 128
// split-KV launches on the split_kv tile (in-kernel merge); padded head dims and (192, 128) stay on
// sm80, the pages the TMA takes stay on the TMA instances (=1), the gathered tiles walk statically.
TEST(CudaPlan, Sm90GatherPagedCaches) {
  using fa4::cuda::sm90::Tile;
  namespace sm90 = fa4::cuda::sm90;
  // The instances' shapes are what the kernel's register split and copy mapping assume
  // (fwd_gather.h / .cuh): two consumers, 32 or 16 rows per producer warp.
  for (int d : {64, 128, 256})
    for (Tile t : {Tile::standard, Tile::short_masked, Tile::long_keys, Tile::split_kv}) {
      if (!sm90::has_gather_instance(d, d, t)) continue;
      EXPECT_EQ(sm90::tile_cfg(d, d, t).consumers, 2) << d;
      EXPECT_TRUE(sm90::tile_cfg(d, d, t).block_n == 128 || sm90::tile_cfg(d, d, t).block_n == 64) << d;
    }
  for (int d : {64, 128, 256}) EXPECT_TRUE(sm90::has_gather_instance(d, d, Tile::split_kv)) << d;
  EXPECT_FALSE(sm90::has_gather_instance(64, 64, Tile::standard));  // (three consumers)
  EXPECT_FALSE(sm90::has_gather_instance(256, 256, Tile::long_keys));
  EXPECT_FALSE(sm90::has_gather_instance(192, 128, Tile::standard));
  if (!FA4_SM90_DECODE) GTEST_SKIP() << "built with FA4_SM90_DECODE=0";
  auto decode = [](int64_t d, int64_t page, int64_t batch = 1, int64_t sk = 8192) {
    return Planned({.batch = batch, .hq = 32, .hkv = 8, .dqk = d, .dv = d, .sq = 1, .sk = sk, .paged = true,
                    .page_size = page});
  };
  if (!FA4_SM90_PAGED_GATHER) {  // (the ablation build, test_plan_switches) those caches stay on sm80
    for (int64_t page : {1, 3}) {
      const Plan pl = decode(128, page).on(h200_auto());
      EXPECT_EQ(pl.kernel, Kernel::sm80) << page;
      EXPECT_FALSE(pl.sm90_gather) << page;
    }
    return;
  }
  // B 1 decode, 32 / 8: PackGQA, split-KV on the split_kv tile where it pays (its gather twin
  // merges the splits; sm90::split_kv_pays), the contiguous cache's plan.
  for (int64_t page : {1, 3, 16, 32, 48, 200}) {
    const Plan pl = decode(128, page).on(h200_auto());
    EXPECT_EQ(pl.kernel, Kernel::sm90) << page;
    EXPECT_TRUE(pl.sm90_gather) << page;
    EXPECT_TRUE(pl.pack_gqa) << page;
    EXPECT_GT(pl.splits, 1) << page;
    EXPECT_EQ(pl.sm90_tile, FA4_SM90_FUSED_COMBINE ? Tile::split_kv : Tile::standard) << page;
    EXPECT_EQ(pl.n, 128) << page;
    EXPECT_TRUE(sm90::has_gather_instance(pl.dqk, pl.dv, pl.sm90_tile)) << page;
    // the same plan as the contiguous cache's (the gather changes how rows are loaded, not the tiles)
    const Plan flat = Planned({.hq = 32, .hkv = 8, .sq = 1, .sk = 8192}).on(h200_auto());
    EXPECT_EQ(std::make_tuple(pl.sm90_tile, pl.splits, pl.ctas), std::make_tuple(flat.sm90_tile, flat.splits, flat.ctas))
        << page;
    EXPECT_FALSE(flat.sm90_gather);
  }
  const Plan d64 = decode(64, 16).on(h200_auto());
  const Plan flat64 = Planned({.hq = 32, .hkv = 8, .dqk = 64, .dv = 64, .sq = 1, .sk = 8192}).on(h200_auto());
  EXPECT_EQ(d64.kernel, Kernel::sm90);
  EXPECT_TRUE(d64.sm90_gather);
  EXPECT_GT(d64.splits, 1);
  EXPECT_EQ(std::make_tuple(d64.sm90_tile, d64.splits, d64.ctas), std::make_tuple(flat64.sm90_tile, flat64.splits, flat64.ctas));
  EXPECT_EQ(d64.sm90_tile, FA4_SM90_FUSED_COMBINE ? Tile::split_kv : Tile::short_masked);
  for (int64_t sk : {2048, 8192}) {  // D 256: 64-key tiles, also where the 80-key one would run
    const Plan d256 = decode(256, 16, 1, sk).on(h200_auto());
    EXPECT_EQ(d256.kernel, Kernel::sm90) << sk;
    EXPECT_TRUE(d256.sm90_gather) << sk;
    EXPECT_EQ(d256.n, 64) << sk;
    EXPECT_TRUE(sm90::has_gather_instance(256, 256, d256.sm90_tile)) << sk;
    // 4 packed rows per tile: the split_kv tile pays (sm90::split_kv_pays)
    if (d256.splits > 1) {
      EXPECT_EQ(d256.sm90_tile, FA4_SM90_FUSED_COMBINE ? Tile::split_kv : Tile::standard) << sk;
    }
  }
  // Pages the TMA loads take stay on the TMA instances (=1; =2 gathers them too).
  const bool tma_sub64 = FA4_SM90_PAGED && FA4_SM90_PAGED_SUB && FA4_SM90_SUB_PAGE_MIN <= 64;
  for (int64_t page : {64, 128, 256}) {
    const Plan pl = decode(128, page).on(h200_auto());
    EXPECT_EQ(pl.kernel, Kernel::sm90) << page;
    const bool tma = FA4_SM90_PAGED && (page != 64 || tma_sub64);
    EXPECT_EQ(pl.sm90_gather, FA4_SM90_PAGED_GATHER >= 2 || !tma) << page;
  }
  // Padded head dims (96 -> 128) and (192, 128) have no gather instance: sm80, as without it.
  EXPECT_EQ(decode(96, 16).on(h200_auto()).kernel, Kernel::sm80);
  EXPECT_EQ(Planned({.hq = 32, .hkv = 8, .dqk = 192, .dv = 128, .sq = 1, .sk = 8192, .paged = true, .page_size = 16})
                .on(h200_auto()).kernel,
            Kernel::sm80);
  // An fp8 KV cache: the sm90 fp8_kv tile's TMA loads (16-row e4m3 pages are 2 KB boxes, Sm90Fp8KvTile),
  // never a gather instance.
  Shape fp8 = {.hq = 32, .hkv = 8, .sq = 1, .sk = 8192, .paged = true, .page_size = 16};
  fp8.kv_fp8 = true;
  EXPECT_EQ(Planned(fp8).on(h200_auto()).kernel, FA4_SM90_FP8_KV ? Kernel::sm90 : Kernel::sm80);
  EXPECT_FALSE(Planned(fp8).on(h200_auto()).sm90_gather);
  // B 32 decode fills the GPU unsplit: sm80's decode tiles, as for the contiguous cache
  // (sm80_takes_decode) -- unless FA4_CUDA_KERNEL=sm90, which then gathers, unsplit.
  EXPECT_EQ(decode(128, 16, 32).on(h200_auto()).kernel, Kernel::sm80);
  DeviceLimits pref = h200_auto();
  pref.prefer = Kernel::sm90;
  const Plan b32 = decode(128, 16, 32).on(pref);
  EXPECT_EQ(b32.kernel, Kernel::sm90);
  EXPECT_TRUE(b32.sm90_gather);
  EXPECT_EQ(b32.splits, 1);
  EXPECT_EQ(b32.sm90_tile, Tile::standard);
  // Chunked prefill (B 4, 512 rows against 64k keys, causal), 16-row pages: gathered, the tile of
  // the contiguous cache.
  const Plan chunk = Planned({.batch = 4, .hq = 32, .hkv = 8, .sq = 512, .sk = 65536, .paged = true, .page_size = 16,
                              .causal = true}).on(h200_auto());
  EXPECT_EQ(chunk.kernel, Kernel::sm90);
  EXPECT_TRUE(chunk.sm90_gather);
  EXPECT_EQ(chunk.sm90_tile, Tile::standard);
  const Plan chunk64 = Planned({.batch = 4, .hq = 32, .hkv = 8, .dqk = 64, .dv = 64, .sq = 512, .sk = 65536, .paged = true,
                                .page_size = 16, .causal = true}).on(h200_auto());
  EXPECT_EQ(chunk64.kernel, Kernel::sm90);
  EXPECT_TRUE(chunk64.sm90_gather);
  EXPECT_EQ(chunk64.sm90_tile, Tile::short_masked);
  // Long causal prefill, which the TMA instances walk dynamically (Sm90LongMaskedWalkDynamically):
  // the gather instances walk statically, in the same order's static form.
  DeviceLimits dl = h200_auto();
  dl.l2_bytes = 60 << 20;
  auto causal = [&](int64_t page) {
    return Planned({.batch = 2, .hq = 16, .hkv = 16, .sq = 8192, .sk = 8192, .paged = true, .page_size = page,
                    .causal = true}).on(dl);
  };
  const Plan tma = causal(128), gat = causal(16);
  EXPECT_EQ(tma.kernel, Kernel::sm90);
  EXPECT_EQ(gat.kernel, Kernel::sm90);
  EXPECT_TRUE(gat.sm90_gather);
  if (sm90::dynamic_walk(128) && FA4_SM90_PAGED && FA4_SM90_PAGED_GATHER < 2) {
    EXPECT_EQ(tma.sched.dynamic, 1);
  }
  EXPECT_EQ(gat.sched.dynamic, 0);
  EXPECT_EQ(gat.sched.heavy_x, 0);
  EXPECT_EQ(gat.ctas, 132);
}

TEST(CudaPlan, Sm90LeavesWhatItDoesNotTakeToSm80) {
  {  // no keys: a tensor map has no empty dimension
    DeviceLimits pref = h200_auto();
    pref.prefer = Kernel::sm90;
    EXPECT_EQ(Planned({.batch = 4, .hq = 64, .hkv = 64, .sq = 1024, .sk = 0}).on(pref).kernel, Kernel::sm80);
  }
  const Shape big{.batch = 2, .hq = 16, .hkv = 16, .sq = 4096, .sk = 4096};
  auto kernel = [](Shape s, DeviceLimits dl) { return Planned(s).on(dl).kernel; };
  Shape s = big;
  s.paged = true;  // 16-row pages: a key tile would straddle pages (Sm90PagedWholeKeyTilesPerPage)
  EXPECT_EQ(kernel(s, h200_auto()), FA4_SM90_PAGED_GATHER ? Kernel::sm90 : Kernel::sm80);  // (or gathered)
  s = big, s.num_splits = 2;  // forced split-KV: sm90 splits with FA4_SM90_DECODE
  EXPECT_EQ(kernel(s, h200_auto()), FA4_SM90_DECODE ? Kernel::sm90 : Kernel::sm80);
  s = big, s.dqk = 192, s.dv = 192;  // (192, 192) pads to 256; (192, 128) has its own instance
  EXPECT_EQ(kernel(s, h200_auto()), Kernel::sm90);
  s = big, s.dqk = 64, s.dv = 128;  // no instance for dqk < dv
  EXPECT_EQ(kernel(s, h200_auto()), Kernel::sm80);
  s = big, s.q_head_stride = 132;  // 264-byte head stride: not a multiple of TMA's 16 bytes
  EXPECT_EQ(kernel(s, h200_auto()), Kernel::sm80);
  s = big, s.dtype = DType::float32;
  EXPECT_EQ(kernel(s, h200_auto()), Kernel::simt);
  // Decode-shaped GQA, and a grid below one wave: without FA4_SM90_DECODE sm80's PackGQA tiles
  // and split-KV take them; with it sm90 packs and splits (Sm90DecodePacksAndSplits).
  const Kernel dec = FA4_SM90_DECODE ? Kernel::sm90 : Kernel::sm80;
  EXPECT_EQ(kernel({.batch = 4, .hq = 32, .hkv = 8, .sq = 1, .sk = 8192}, h200_auto()), dec);
  EXPECT_EQ(kernel({.batch = 1, .hq = 8, .hkv = 8, .sq = 1024, .sk = 1024}, h200_auto()), dec);
  // Not a compute capability 9.0 device (the sm_90a image runs nowhere else).
  DeviceLimits a100 = h200_auto();
  a100.cc_major = 8;
  EXPECT_EQ(kernel(big, a100), Kernel::sm80);
  // Its shared memory must fit the opt-in (FA4_CUDA_SMEM_OPTIN caps).
  DeviceLimits cap = capped(101376);
  cap.prefer.reset();
  EXPECT_EQ(kernel(big, cap), Kernel::sm80);
  cap.smem_optin = 232448;
  EXPECT_EQ(kernel(big, cap), Kernel::sm90);
}

// e4m3 inputs run the sm80 kernel's fp8 instances (with their own shared memory: fwd_configs.h
// smem_bytes_fp8: 16-bit Q + one 16-bit K / V tile + paged ring (+ pair_dv area), then the e4m3
// ring, the per-token factors and their paged ring; no compact tile) -- except all-fp8 calls the
// sm90 fp8 tile takes on a compute capability 9.0 device: under FA4_CUDA_KERNEL=sm90, and
// automatically with FA4_SM90_FP8, the default (Sm90Fp8Tile); and fp8 KV caches the sm90 fp8_kv
// tile takes, with FA4_SM90_FP8_KV (default on; Sm90Fp8KvTile), unless FA4_CUDA_KERNEL=sm80.
TEST(CudaPlan, Fp8RunsTheSm80Fp8Instances) {
  using fa4::cuda::sm80::Fp8;
  const Shape big{.batch = 2, .hq = 16, .hkv = 16, .sq = 4096, .sk = 4096};
  Shape all = big, kv = big;
  all.dtype = DType::float8_e4m3;
  kv.kv_fp8 = true;
  DeviceLimits pref = h200_auto();
  for (std::optional<Kernel> k : {std::optional<Kernel>{}, std::optional<Kernel>{Kernel::sm90},
                                  std::optional<Kernel>{Kernel::sm80}, std::optional<Kernel>{Kernel::simt}}) {
    pref.prefer = k;
    for (const Shape& s : {all, kv}) {
      const Plan pl = Planned(s).on(pref);
      EXPECT_EQ(fa4::cuda::sm90_supports(Planned(s).problem(), pref), !s.kv_fp8 || FA4_SM90_FP8_KV);
      const bool sm90 = s.kv_fp8 ? FA4_SM90_FP8_KV && k != Kernel::sm80
                                 : k == Kernel::sm90 || (FA4_SM90_FP8 && k != Kernel::sm80);
      EXPECT_EQ(pl.kernel, sm90 ? Kernel::sm90 : Kernel::sm80);
      if (sm90) continue;
      EXPECT_EQ(pl.sm80_fp8, s.kv_fp8 ? Fp8::kv : Fp8::all);
      EXPECT_EQ(pl.sm80_tile, Tile::prefill);
      // (128 x 128 + 64 x 256) x 2 B + 2 KB paged ring + 2 stages x 64 x 256 B + 2 x 2 x 64 x 4 B + 2 KB
      EXPECT_EQ(pl.smem, 103424);
    }
  }
  EXPECT_EQ(Planned(big).on(h200()).sm80_fp8, Fp8::none);  // 16-bit k / v: the 16-bit instances
  EXPECT_EQ(Planned(big).on(h200()).smem, 100352);
  // Decode, D = 128, an fp8 cache: the decode tile, 3 stages:
  // (16 x 128 + 64 x 256) x 2 + 2048 + 3 x 64 x 256 + 3 x 2 x 64 x 4 + 2048.
  const Plan dec = Planned({.batch = 1, .hq = 32, .hkv = 8, .sq = 1, .sk = 8192, .kv_fp8 = true}).on(h200());
  EXPECT_EQ(dec.kernel, Kernel::sm80);
  EXPECT_EQ(dec.sm80_tile, Tile::decode);
  EXPECT_EQ(dec.smem, 91648);
  EXPECT_TRUE(dec.pack_gqa);
  // 99 KB (sm_86 / sm_89): D = 128 fp8 decode fits (91,648 B; prefill's 103,424 B does not, so
  // prefill shapes run on the decode tile there too); D = 256 has no fp8 tile that fits
  // (prefill 145,920 B with pair_dv, decode 144,384 B) and no compact one: the decode tile
  // stays and cuda_check refuses it by its shared memory.
  EXPECT_EQ(Planned({.batch = 1, .hq = 8, .hkv = 2, .sq = 1, .sk = 4096, .kv_fp8 = true}).on(ampere_99kb()).sm80_tile,
            Tile::decode);
  Shape pre128 = big;
  pre128.kv_fp8 = true;
  EXPECT_EQ(Planned(pre128).on(ampere_99kb()).sm80_tile, Tile::decode);
  const Plan d256 = Planned({.batch = 2, .hq = 4, .hkv = 4, .dqk = 256, .dv = 256, .sq = 1000, .sk = 1000,
                             .kv_fp8 = true}).on(ampere_99kb());
  EXPECT_EQ(d256.sm80_tile, Tile::decode);
  EXPECT_EQ(d256.smem, 144384);
  const Plan p256 = Planned({.dtype = DType::float8_e4m3, .batch = 2, .hq = 4, .hkv = 4, .dqk = 256, .dv = 256,
                             .sq = 1000, .sk = 1000}).on(h200());
  EXPECT_EQ(p256.sm80_tile, Tile::prefill);
  EXPECT_EQ(p256.smem, 145920);
}

// The keys-on-M decode kernel (sm90/decode_kv.h, FA4_SM90_DECODE_KEYS_M): the rule itself, then
// the planner's flag on fp8_kv calls -- set only with the switch, for dense q of <= 16 packed rows
// (B 32 decode 32 / 8: 4 rows; 2 tokens x 4; GQA 16; pages the fp8_kv tile's boxes take; not 32
// rows, varlen q, pages of 24 / 192 rows).
TEST(CudaPlan, Sm90DecodeKeysM) {
  using fa4::cuda::sm90::decode_keys_m_fits;
  EXPECT_TRUE(decode_keys_m_fits(false, 1, 4, false, 0, 128, 128, 128, 8, 1));
  EXPECT_TRUE(decode_keys_m_fits(false, 2, 4, true, 256, 128, 128, 128, 8, 7));
  EXPECT_TRUE(decode_keys_m_fits(false, 8, 1, false, 0, 128, 128, 128, 8, 1));
  EXPECT_TRUE(decode_keys_m_fits(false, 1, 16, false, 0, 128, 128, 128, 8, 1));  // 16 rows
  EXPECT_TRUE(decode_keys_m_fits(false, 3, 4, false, 0, 128, 128, 128, 8, 1));   // 12 rows
  EXPECT_FALSE(decode_keys_m_fits(false, 1, 32, false, 0, 128, 128, 128, 8, 1));  // 32 rows
  EXPECT_FALSE(decode_keys_m_fits(false, 17, 1, false, 0, 128, 128, 128, 8, 1));  // 17 rows
  // One N tile of 8 rows up to 8, two up to 16.
  EXPECT_EQ(fa4::cuda::sm90::decode_keys_m_tiles(1), 1);
  EXPECT_EQ(fa4::cuda::sm90::decode_keys_m_tiles(8), 1);
  EXPECT_EQ(fa4::cuda::sm90::decode_keys_m_tiles(9), 2);
  EXPECT_EQ(fa4::cuda::sm90::decode_keys_m_tiles(16), 2);
  EXPECT_FALSE(decode_keys_m_fits(true, 1, 4, false, 0, 128, 128, 128, 8, 1));    // varlen q
  for (int ps : {8, 16, 32, 64, 128, 512})  // one box per page, or whole tiles in a page
    EXPECT_EQ(decode_keys_m_fits(false, 1, 4, true, ps, 128, 128, 128, 8, 1),
              static_cast<bool>(FA4_SM90_PAGED_SUB) || ps >= 128)
        << ps;
  for (int ps : {1, 3, 24, 48, 96, 192})  // not a box sequence
    EXPECT_FALSE(decode_keys_m_fits(false, 1, 4, true, ps, 128, 128, 128, 8, 1)) << ps;
  EXPECT_FALSE(decode_keys_m_fits(false, 1, 4, false, 0, 64, 64, 128, 8, 1));     // D 64
  EXPECT_FALSE(decode_keys_m_fits(false, 1, 4, false, 0, 128, 128, 64, 8, 1));    // 64-key boxes
  EXPECT_FALSE(decode_keys_m_fits(false, 1, 4, false, 0, 128, 128, 128, 70000, 1));  // grid y
  EXPECT_FALSE(decode_keys_m_fits(false, 0, 4, false, 0, 128, 128, 128, 8, 1));   // no rows
  if (!FA4_SM90_FP8_KV) return;
  auto plan = [](Shape s) {
    s.kv_fp8 = true;
    return Planned(s).on(h200_auto());
  };
  const Shape dec{.batch = 32, .hq = 32, .hkv = 8, .sq = 1, .sk = 16384};
  const Plan d = plan(dec);
  ASSERT_EQ(d.kernel, Kernel::sm90);
  EXPECT_EQ(d.sm90_tile, fa4::cuda::sm90::Tile::fp8_kv);
  EXPECT_EQ(d.sm90_decode_keys_m, static_cast<bool>(FA4_SM90_DECODE_KEYS_M));
  Shape s = dec;
  s.sq = 2, s.causal = true;  // speculative: 8 rows
  EXPECT_EQ(plan(s).sm90_decode_keys_m, static_cast<bool>(FA4_SM90_DECODE_KEYS_M));
  s = dec, s.paged = true, s.page_size = 256;
  EXPECT_EQ(plan(s).sm90_decode_keys_m, static_cast<bool>(FA4_SM90_DECODE_KEYS_M));
  // Two CTAs per SM: B 4 (32 CTAs a split) fills 2 x 132 slots with 7 splits (224 CTAs, the first
  // count within 0.85 of the best wave efficiency; the fp8_kv tile, one CTA per SM: 4); B 32 (256
  // CTAs) stays whole.
  s = dec, s.batch = 4;
  EXPECT_EQ(plan(s).splits, FA4_SM90_DECODE_KEYS_M ? 7 : 4);
  EXPECT_EQ(d.splits, 1);
  // GQA 7 (28 / 4), which the fp8_kv tile cannot pack (sm80 without the kernel): its grid counts kv
  // heads, B 4 x 4 = 16 CTAs a split -> 15 splits over 264 slots.
  s = dec, s.batch = 4, s.hq = 28, s.hkv = 4;
  EXPECT_EQ(plan(s).kernel, FA4_SM90_DECODE_KEYS_M ? Kernel::sm90 : Kernel::sm80);
  EXPECT_EQ(plan(s).sm90_decode_keys_m, static_cast<bool>(FA4_SM90_DECODE_KEYS_M));
  if (FA4_SM90_DECODE_KEYS_M) {
    EXPECT_EQ(plan(s).splits, 15);
  }
  s = dec, s.hq = 128;  // 16 rows
  EXPECT_EQ(plan(s).sm90_decode_keys_m, static_cast<bool>(FA4_SM90_DECODE_KEYS_M));
  s = dec, s.sq = 4, s.causal = true;  // 16 rows
  EXPECT_EQ(plan(s).sm90_decode_keys_m, static_cast<bool>(FA4_SM90_DECODE_KEYS_M));
  s = dec, s.sq = 8, s.causal = true;  // 32 rows
  EXPECT_FALSE(plan(s).sm90_decode_keys_m);
  s = dec, s.softcap = 30.f;
  EXPECT_EQ(plan(s).sm90_decode_keys_m, static_cast<bool>(FA4_SM90_DECODE_KEYS_M));
  s = dec, s.paged = true, s.page_size = 16;
  EXPECT_EQ(plan(s).sm90_decode_keys_m, FA4_SM90_DECODE_KEYS_M && FA4_SM90_PAGED_SUB);
  s = dec, s.paged = true, s.page_size = 24;  // sm80's fp8 instances
  EXPECT_FALSE(plan(s).sm90_decode_keys_m);
  s = dec, s.sq = 512;  // chunked prefill
  EXPECT_FALSE(plan(s).sm90_decode_keys_m);
  // Per-token factors: the keys-on-M kernel where built in, else sm80 (the fp8_kv tile takes
  // factors per (batch, kv head) only); chunked prefill with them stays on sm80.
  s = dec;
  s.kv_tok = true;
  EXPECT_EQ(plan(s).sm90_decode_keys_m, static_cast<bool>(FA4_SM90_DECODE_KEYS_M));
  EXPECT_EQ(plan(s).kernel, FA4_SM90_DECODE_KEYS_M ? Kernel::sm90 : Kernel::sm80);
  s.paged = true, s.page_size = 16, s.sq = 2, s.causal = true;
  EXPECT_EQ(plan(s).kernel, FA4_SM90_DECODE_KEYS_M && FA4_SM90_PAGED_SUB ? Kernel::sm90 : Kernel::sm80);
  s = dec, s.kv_tok = true, s.sq = 512, s.causal = true;
  EXPECT_EQ(plan(s).kernel, Kernel::sm80);
  // The 16-bit cache never.
  s = dec;
  DeviceLimits pref = h200_auto();
  pref.prefer = Kernel::sm90;
  EXPECT_FALSE(Planned(s).on(pref).sm90_decode_keys_m);
}

// An fp8 KV cache (16-bit q, e4m3 k / v) on the sm90 kernel's fp8_kv tile (sm90/fwd_config.h
// Tile::fp8_kv, FA4_SM90_FP8_KV): D 128, factors per (batch, kv head); decode-shaped calls too (the
// 16-bit tiles leave B 32 decode to sm80: sm80_takes_decode), split launches through the combine
// kernel (no split_kv tile), contiguous and paged caches whose pages fit its boxes. Per-token
// factors, other head dims, odd pages and FA4_CUDA_KERNEL=sm80 keep sm80's fp8 instances.
TEST(CudaPlan, Sm90Fp8KvTile) {
  using fa4::cuda::sm80::Fp8;
  const fa4::cuda::sm90::Tile kv_tile = fa4::cuda::sm90::Tile::fp8_kv;
  auto shape = [](int64_t batch, int64_t sk, int64_t page) {
    Shape s{.batch = batch, .hq = 32, .hkv = 8, .sq = 1, .sk = sk, .paged = page > 0, .page_size = page > 0 ? page : 16};
    s.kv_fp8 = true;
    return s;
  };
  // Q 32 KB + 16-bit ring 2 x 64 KB + byte ring 2 x 32 KB + barriers / slack 2 KB (O staged in Q)
  EXPECT_EQ(fa4::cuda::sm90::smem_bytes(128, 128, kv_tile), 231424);
  EXPECT_EQ(fa4::cuda::sm90::o_staging(128, 128, kv_tile), fa4::cuda::sm90::OStaging::q);
  EXPECT_FALSE(fa4::cuda::sm90::dynamic_walk(128, kv_tile));
  EXPECT_FALSE(fa4::cuda::sm90::fused_merge(128, 128, kv_tile));
  for (int64_t page : {0, 16, 64, 128, 256}) {
    for (int64_t sk : {4096, 16384, 65536}) {
      const Plan pl = Planned(shape(32, sk, page)).on(h200_auto());
      if (!FA4_SM90_FP8_KV) {
        EXPECT_EQ(pl.kernel, Kernel::sm80);
        EXPECT_EQ(pl.sm80_fp8, Fp8::kv);
        continue;
      }
      EXPECT_EQ(pl.kernel, Kernel::sm90) << page << " " << sk;
      EXPECT_EQ(pl.sm90_tile, kv_tile);
      EXPECT_EQ(pl.sm80_fp8, Fp8::none);
      EXPECT_EQ(pl.smem, 231424);
      EXPECT_EQ(pl.m, 128);
      EXPECT_EQ(pl.n, 128);
      EXPECT_TRUE(pl.pack_gqa);  // 4 heads x 1 row per kv head
      EXPECT_EQ(pl.splits, 1);   // B 32 x 8 kv heads fill the 132 SMs
      EXPECT_FALSE(pl.sm90_gather);
      EXPECT_EQ(pl.sched.dynamic, 0);
      // 4 rows per tile: consumer 0 alone (sm90::solo_capable), or the 1Q tile where it is built
      const bool one_q = fa4::cuda::sm90::one_q_capable(kv_tile, 128, 128);
      EXPECT_EQ(pl.sm90_one_q, one_q);
      EXPECT_EQ(pl.sm90_solo, !one_q);
    }
  }
  // The 16-bit tiles run alone only in FA4_SM90_SOLO builds, as 1Q tiles in FA4_SM90_ONE_Q >= 2 ones.
  Shape bf16 = shape(32, 16384, 0);
  bf16.kv_fp8 = false;
  DeviceLimits pref = h200_auto();
  pref.prefer = Kernel::sm90;
  const Plan b16 = Planned(bf16).on(pref);
  EXPECT_EQ(b16.kernel, Kernel::sm90);
  EXPECT_EQ(b16.sm90_one_q, fa4::cuda::sm90::one_q_capable(b16.sm90_tile, 128, 128));
  EXPECT_EQ(b16.sm90_solo, FA4_SM90_SOLO && !b16.sm90_one_q);
  if (!FA4_SM90_FP8_KV) return;
  // Chunked prefill (64 rows or more per tile): both consumers.
  Shape chunk = shape(4, 65536, 0);
  chunk.sq = 512;
  EXPECT_FALSE(Planned(chunk).on(h200_auto()).sm90_solo);
  EXPECT_FALSE(Planned(chunk).on(h200_auto()).sm90_one_q);
  // B 1: split, through the combine kernel (the tile stays fp8_kv, workspace for the partials).
  const Plan b1 = Planned(shape(1, 65536, 0)).on(h200_auto());
  EXPECT_EQ(b1.kernel, Kernel::sm90);
  EXPECT_EQ(b1.sm90_tile, kv_tile);
  EXPECT_GT(b1.splits, 1);
  EXPECT_GT(b1.workspace, 0u);
  const Plan b1p = Planned(shape(1, 65536, 64)).on(h200_auto());
  EXPECT_EQ(b1p.sm90_tile, kv_tile);
  EXPECT_GT(b1p.splits, 1);
  // Forced splits too.
  Shape forced = shape(4, 8192, 0);
  forced.num_splits = 3;
  EXPECT_EQ(Planned(forced).on(h200_auto()).splits, 3);
  EXPECT_EQ(Planned(forced).on(h200_auto()).sm90_tile, kv_tile);
  // Chunked prefill (512 rows against a long cache, causal), contiguous and paged.
  for (int64_t page : {0, 16, 256}) {
    Shape chunk{.batch = 4, .hq = 32, .hkv = 8, .sq = 512, .sk = 65536, .paged = page > 0, .page_size = page > 0 ? page : 16,
                .causal = true};
    chunk.kv_fp8 = true;
    const Plan pl = Planned(chunk).on(h200_auto());
    EXPECT_EQ(pl.kernel, Kernel::sm90) << page;
    EXPECT_EQ(pl.sm90_tile, kv_tile);
    EXPECT_EQ(pl.sched.dynamic, 0);  // (the static walk: the converters walk it too)
  }
  // sm80: per-token factors (but on the keys-on-M decode kernel where built in), FA4_CUDA_KERNEL=sm80,
  // head dims without an instance, pages the boxes do not take, fp16 q like bf16.
  Shape tok = shape(32, 4096, 0);
  tok.kv_tok = true;
  const Kernel tok_kernel = FA4_SM90_DECODE_KEYS_M ? Kernel::sm90 : Kernel::sm80;
  EXPECT_EQ(Planned(tok).on(h200_auto()).kernel, tok_kernel);
  EXPECT_EQ(fa4::cuda::sm90_supports(Planned(tok).problem(), h200_auto()), static_cast<bool>(FA4_SM90_DECODE_KEYS_M));
  DeviceLimits pref90 = h200_auto();
  pref90.prefer = Kernel::sm90;
  EXPECT_EQ(Planned(tok).on(pref90).kernel, tok_kernel);  // FA4_CUDA_KERNEL=sm90 cannot take it either without it
  if (!FA4_SM90_DECODE_KEYS_M) {
    EXPECT_EQ(Planned(tok).on(pref90).sm80_fp8, Fp8::kv);
  }
  EXPECT_EQ(Planned(shape(32, 4096, 0)).on(h200()).kernel, Kernel::sm80);
  EXPECT_EQ(Planned(shape(32, 4096, 0)).on(h200()).sm80_fp8, Fp8::kv);
  EXPECT_EQ(Planned(shape(32, 4096, 0)).on(pref90).sm90_tile, kv_tile);
  for (int64_t d : {64, 96, 256}) {
    Shape s = shape(32, 4096, 0);
    s.dqk = s.dv = d;
    EXPECT_EQ(Planned(s).on(h200_auto()).kernel, Kernel::sm80) << d;
  }
  for (int64_t page : {1, 3, 24, 32 + 8}) EXPECT_EQ(Planned(shape(32, 4096, page)).on(h200_auto()).kernel, Kernel::sm80) << page;
  EXPECT_EQ(Planned(shape(32, 4096, 8)).on(h200_auto()).kernel, Kernel::sm90);  // 8 rows: one swizzle atom
  Shape f16 = shape(32, 4096, 0);
  f16.dtype = DType::float16;
  EXPECT_EQ(Planned(f16).on(h200_auto()).sm90_tile, kv_tile);
  // Other devices: sm80.
  EXPECT_EQ(Planned(shape(32, 4096, 0)).on(ampere_99kb()).kernel, Kernel::sm80);
}

// All-fp8 on the sm90 kernel's fp8 tile (sm90/fwd_config.h Tile::fp8): 128-key tiles, the 16-bit
// tiles' rows (D 64: three consumers), e4m3 Q / K / V^T rings + a bf16 O staging tile, no split,
// and the V^T workspace of sm90/fp8_layout.h (its own size, no split partials before it).
TEST(CudaPlan, Sm90Fp8Tile) {
  DeviceLimits sm90 = h200_auto();
  sm90.prefer = Kernel::sm90;
  struct Want {
    int64_t d;
    int m, smem;
  };
  // smem: (block_m x D + stages x n x 2D) B + 2 KB (barriers, alignment) + block_m x D x 2 B (O);
  // n = 128 keys (D 128 below FA4_SM90_FP8_LONG_KEYS_MIN_SK keys; 0 in the switches build, where the
  // 192-key tile takes every D 128 call)
  constexpr bool long_at_3000 = FA4_SM90_FP8_LONG_KEYS_MIN_SK >= 0 && FA4_SM90_FP8_LONG_KEYS_MIN_SK <= 3000;
  constexpr int n128 = long_at_3000 ? FA4_SM90_FP8_LONG_KEYS_BLOCK_N_D128 : 128;
  constexpr int n64 = long_at_3000 ? FA4_SM90_FP8_LONG_KEYS_BLOCK_N_D64 : 128;
  const Want wants[] = {{64, 192, 192 * 64 + 3 * n64 * 128 + 2048 + 192 * 64 * 2},
                        {128, 128, 128 * 128 + 3 * n128 * 256 + 2048 + 128 * 128 * 2},
                        {256, 128, 128 * 256 + 2 * 128 * 512 + 2048 + 128 * 256 * 2}};
  for (const Want& w : wants) {
    SCOPED_TRACE(w.d);
    const Shape s{.dtype = DType::float8_e4m3, .batch = 2, .hq = 16, .hkv = 4, .dqk = w.d, .dv = w.d,
                  .sq = 1000, .sk = 3000, .causal = true};
    const Plan pl = Planned(s).on(sm90);
    ASSERT_EQ(pl.kernel, Kernel::sm90);
    EXPECT_EQ(pl.sm90_tile, w.d <= 128 && long_at_3000 ? fa4::cuda::sm90::Tile::fp8_long_keys : fa4::cuda::sm90::Tile::fp8);
    EXPECT_EQ(pl.m, w.m);
    EXPECT_EQ(pl.n, w.d == 128 ? n128 : w.d == 64 ? n64 : 128);
    EXPECT_LE(pl.smem, 232448);
    EXPECT_EQ(pl.splits, 1);
    // (FA4_SM90_FP8_VT_IN_KERNEL) A tile that transposes V itself: + its V byte ring (stages x n x D
    // bytes), no V^T workspace.
    if (fa4::cuda::sm90::fp8_vt_in_kernel(static_cast<int>(w.d), static_cast<int>(w.d), pl.sm90_tile)) {
      EXPECT_EQ(pl.smem, w.smem + 3 * static_cast<int>(pl.n) * static_cast<int>(w.d));
      EXPECT_EQ(pl.workspace, 0u);
      EXPECT_EQ(pl.fp8_vt.bytes, 0);
      continue;
    }
    EXPECT_EQ(pl.smem, w.smem);
    // V^T: [batch][hkv][dv][3000 keys rounded up to a multiple of the pad: 3072 for 128 (or 384)]
    const int pad = fa4::cuda::sm90::fp8_vt_pad(static_cast<int>(pl.n));
    const int64_t cols = (3000 + pad - 1) / pad * pad;
    EXPECT_EQ(pl.fp8_vt.pad, pad);
    if (!long_at_3000) {
      EXPECT_EQ(pl.fp8_vt.cols, 3072);
    }
    EXPECT_EQ(pl.fp8_vt.cols, cols);
    EXPECT_EQ(pl.fp8_vt.bl, 2);
    EXPECT_EQ(pl.fp8_vt_offset, 0u);
    EXPECT_EQ(pl.workspace, static_cast<size_t>(2 * 4 * w.d * cols));
  }
  // The wider key tiles (Tile::fp8_long_keys) from FA4_SM90_FP8_LONG_KEYS_MIN_SK keys in masked
  // calls, FA4_SM90_FP8_LONG_KEYS_MIN_SK_UNMASKED in unmasked ones (the longest sequence, or the
  // max_seqlen_k hint of device-resident varlen lengths), never at D 256: D 128 192 keys, 16 + 3 x
  // (24 + 24) + 2 + 32 KB, a V^T pad of 384 (8200 keys -> 8448 columns); D 64 160 keys, 12 + 3 x
  // (10 + 10) + 2 + 24 KB, a pad of 640 (8200 -> 8320).
  if (FA4_SM90_FP8_LONG_KEYS_MIN_SK_UNMASKED >= 0 && FA4_SM90_FP8_LONG_KEYS_MIN_SK_UNMASKED <= 8200) {
    for (int64_t d : {64, 128, 256}) {
      SCOPED_TRACE(d);
      const Shape s{.dtype = DType::float8_e4m3, .batch = 1, .hq = 4, .hkv = 2, .dqk = d, .dv = d, .sq = 300, .sk = 8200};
      const Plan pl = Planned(s).on(sm90);
      ASSERT_EQ(pl.kernel, Kernel::sm90);
      EXPECT_EQ(pl.sm90_tile, d <= 128 ? fa4::cuda::sm90::Tile::fp8_long_keys : fa4::cuda::sm90::Tile::fp8);
      EXPECT_EQ(pl.n, d == 128 ? 192 : d == 64 ? 160 : 128);
      EXPECT_EQ(pl.fp8_vt.pad, d == 128 ? 384 : d == 64 ? 640 : 128);
      EXPECT_EQ(pl.fp8_vt.cols, d == 128 ? 8448 : 8320);
      if (d == 128) {
        EXPECT_EQ(pl.smem, 128 * 128 + 3 * 192 * 256 + 2048 + 128 * 128 * 2);
      }
      if (d == 64) {
        EXPECT_EQ(pl.m, 192);
        EXPECT_EQ(pl.smem, 192 * 64 + 3 * 160 * 128 + 2048 + 192 * 64 * 2);
      }
      EXPECT_EQ(pl.splits, 1);
    }
  }
  // At each bound the wider tile, one key below it 128 (D 128, D 64): unmasked, causal (Sq = Sk),
  // and a sliding window (a mask too).
  for (int masked = 0; masked < 3; ++masked) {
    const int bound = masked ? FA4_SM90_FP8_LONG_KEYS_MIN_SK : FA4_SM90_FP8_LONG_KEYS_MIN_SK_UNMASKED;
    if (bound <= 0) continue;
    for (int64_t d : {128, 64}) {
      SCOPED_TRACE(::testing::Message() << "masked " << masked << " d " << d);
      Shape s{.dtype = DType::float8_e4m3, .batch = 1, .hq = 4, .hkv = 2, .dqk = d, .dv = d,
              .sq = masked == 1 ? bound : 300, .sk = bound, .causal = masked == 1};
      if (masked == 2) s.window_right = 0;
      EXPECT_EQ(Planned(s).on(sm90).sm90_tile, fa4::cuda::sm90::Tile::fp8_long_keys);
      s.sk = bound - 1;
      if (masked == 1) s.sq = bound - 1;
      EXPECT_EQ(Planned(s).on(sm90).sm90_tile, fa4::cuda::sm90::Tile::fp8);
    }
  }
  // Padded dims: (100, 100) on the D 128 tile; (192, 192) on D 256; no fp8 tile for (192, 128)
  // nor dqk != dv after padding.
  auto plan = [&](Shape s) {
    s.dtype = DType::float8_e4m3;
    return Planned(s).on(sm90);
  };
  const Shape big{.batch = 2, .hq = 16, .hkv = 16, .sq = 2048, .sk = 2048};
  Shape s = big;
  s.dqk = s.dv = 96;
  EXPECT_EQ(plan(s).kernel, Kernel::sm90);
  EXPECT_EQ(plan(s).dqk, 128);
  s.dqk = s.dv = 192;
  EXPECT_EQ(plan(s).kernel, Kernel::sm90);
  EXPECT_EQ(plan(s).dqk, 256);
  s.dv = 128;
  EXPECT_EQ(plan(s).kernel, Kernel::sm80);
  s = big, s.dqk = 64, s.dv = 128;
  EXPECT_EQ(plan(s).kernel, Kernel::sm80);
  // What it leaves to sm80's fp8 instances: paged caches, a forced split count, q rows whose
  // byte strides TMA cannot take (136 B), an fp8 cache under 16-bit q.
  s = big, s.paged = true, s.page_size = 256;
  EXPECT_EQ(plan(s).kernel, Kernel::sm80);
  s = big, s.num_splits = 3;
  EXPECT_EQ(plan(s).kernel, Kernel::sm80);
  s = big, s.num_splits = 1;
  EXPECT_EQ(plan(s).kernel, Kernel::sm90);
  s = big, s.q_head_stride = 136;
  EXPECT_EQ(plan(s).kernel, Kernel::sm80);
  s = big, s.q_head_stride = 144;
  EXPECT_EQ(plan(s).kernel, Kernel::sm90);
  // v rows the TMA cannot take (136-byte head stride): where the tile transposes V itself
  // (FA4_SM90_FP8_VT_IN_KERNEL, D 128) its TMA reads them, so sm80; where the pre-pass reads v, sm90.
  // (The tile of these calls: the 128-key one, or the 192-key one where FA4_SM90_FP8_LONG_KEYS_MIN_SK
  // puts every D 128 call on it -- the switches build -- which keeps the pre-pass.)
  const bool v_by_tma = fa4::cuda::sm90::fp8_vt_in_kernel(128, 128, plan(big).sm90_tile);
  s = big, s.v_head_stride = 136;
  EXPECT_EQ(plan(s).kernel, v_by_tma ? Kernel::sm80 : Kernel::sm90);
  s = big, s.v_head_stride = 144;
  EXPECT_EQ(plan(s).kernel, Kernel::sm90);
  // Decode-shaped calls under the preference: no split (the heuristic would split them on the
  // 16-bit tiles), PackGQA as the 16-bit tiles pack.
  const Plan dec = plan({.batch = 1, .hq = 32, .hkv = 8, .sq = 1, .sk = 8192});
  EXPECT_EQ(dec.kernel, Kernel::sm90);
  EXPECT_EQ(dec.splits, 1);
  // (the V^T workspace: 8 kv heads x 128 dims x 8192 keys rounded up to the pad: 128, or 384 with
  // the 192-key e4m3 tile; none where the 128-key tile transposes V itself)
  const bool dec_long = FA4_SM90_FP8_LONG_KEYS_MIN_SK_UNMASKED >= 0 && FA4_SM90_FP8_LONG_KEYS_MIN_SK_UNMASKED <= 8192;
  EXPECT_EQ(dec.sm90_tile, dec_long ? fa4::cuda::sm90::Tile::fp8_long_keys : fa4::cuda::sm90::Tile::fp8);
  if (fa4::cuda::sm90::fp8_vt_in_kernel(128, 128, dec.sm90_tile)) {
    EXPECT_EQ(dec.workspace, 0u);
  } else {
    const int64_t pad = dec.fp8_vt.pad;
    EXPECT_EQ(pad, dec_long ? 384 : 128);
    EXPECT_EQ(dec.workspace, static_cast<size_t>(8 * 128 * ((8192 + pad - 1) / pad * pad)));
  }
  // The automatic choice (FA4_SM90_FP8, the default; else sm80): sm90 for every call it supports,
  // unless sm80's heuristic splits it over more SMs than the unsplit sm90 grid's tiles times the
  // fp8 tile's speed per SM (D 64 2.0, D 128 2.8, D 256 5.9; cuda/plan.cpp plan_fp8_all): full
  // grids, small grids over short keys and small grids that sm80 splits into fewer busy SMs run
  // sm90; few tiles over long keys and decode run sm80.
  struct Auto {
    Shape s;
    int sm80_splits;  // the sm80 plan's split count (H200: 132 SMs)
    bool sm90;
  };
  const Auto autos[] = {
      {{.batch = 2, .hq = 16, .hkv = 16, .sq = 4096, .sk = 4096}, 1, true},
      {{.batch = 1, .hq = 2, .hkv = 2, .sq = 128, .sk = 128}, 1, true},    // 2 tiles, no split
      {{.batch = 1, .hq = 8, .hkv = 8, .sq = 1024, .sk = 1024}, 4, true},  // 64 tiles x 2.8 >= 132 SMs
      {{.batch = 1, .hq = 8, .hkv = 8, .sq = 512, .sk = 8192}, 7, false},  // 32 tiles x 2.8 < 132
      {{.batch = 1, .hq = 8, .hkv = 8, .dqk = 256, .dv = 256, .sq = 512, .sk = 4096}, 2, true},  // 32 x 5.9
      {{.batch = 1, .hq = 4, .hkv = 4, .dqk = 256, .dv = 256, .sq = 512, .sk = 8192}, 4, false},  // 16 x 5.9
      {{.batch = 1, .hq = 32, .hkv = 8, .sq = 1, .sk = 8192}, 29, false},  // decode: 8 packed tiles
      {{.batch = 1, .hq = 32, .hkv = 8, .dqk = 64, .dv = 64, .sq = 4, .sk = 8192}, 55, false},
  };
  for (const Auto& a : autos) {
    Shape sh = a.s;
    sh.dtype = DType::float8_e4m3;
    SCOPED_TRACE(std::to_string(sh.dqk) + " " + std::to_string(sh.sq) + " x " + std::to_string(sh.sk));
    EXPECT_EQ(Planned(sh).on(h200()).splits, a.sm80_splits);
    const Plan pl = Planned(sh).on(h200_auto());
    EXPECT_EQ(pl.kernel, FA4_SM90_FP8 && a.sm90 ? Kernel::sm90 : Kernel::sm80);
    if (pl.kernel == Kernel::sm90) {  // (unmasked: the wider key tiles from the unmasked bound, D <= 128)
      const bool long_keys = sh.dqk <= 128 && FA4_SM90_FP8_LONG_KEYS_MIN_SK_UNMASKED >= 0 &&
                             sh.sk >= FA4_SM90_FP8_LONG_KEYS_MIN_SK_UNMASKED;
      EXPECT_EQ(std::make_tuple(pl.sm90_tile, pl.splits),
                std::make_tuple(long_keys ? fa4::cuda::sm90::Tile::fp8_long_keys : fa4::cuda::sm90::Tile::fp8, 1));
    }
  }
}

// The V^T workspace layout (sm90/fp8_layout.h): dense rows of whole pads (128 keys; 384 for the
// 192-key tile); varlen sequences at 16-byte aligned columns whose pad-rounded ranges never overlap
// and end inside the row, for any non-decreasing cu_seqlens_k (and any seqused_k <= the slot), for
// either tile; sizes that overflow are refused, and key blocks whose pad the gap does not cover.
TEST(CudaPlan, Sm90Fp8VtLayout) {
  using fa4::cuda::sm90::Fp8VtLayout;
  using fa4::cuda::sm90::fp8_vt_col0;
  using fa4::cuda::sm90::fp8_vt_layout;
  Fp8VtLayout l;
  ASSERT_TRUE(fp8_vt_layout(false, 128, 3, 2, 100, 1, 0, &l));
  EXPECT_EQ(l.cols, 128);
  EXPECT_EQ(l.pad, 128);
  EXPECT_EQ(l.bl, 3);
  EXPECT_EQ(l.bytes, 3 * 2 * 100 * 128);
  ASSERT_TRUE(fp8_vt_layout(false, 192, 3, 2, 100, 1, 0, &l));
  EXPECT_EQ(l.cols, 384);
  EXPECT_EQ(l.pad, 384);
  EXPECT_EQ(l.bytes, 3 * 2 * 100 * 384);
  ASSERT_TRUE(fp8_vt_layout(false, 128, 1, 1, 64, 257, 0, &l));
  EXPECT_EQ(l.cols, 384);
  ASSERT_TRUE(fp8_vt_layout(false, 192, 1, 1, 64, 385, 0, &l));
  EXPECT_EQ(l.cols, 768);
  ASSERT_TRUE(fp8_vt_layout(false, 128, 1, 1, 64, 0, 0, &l));
  EXPECT_EQ(l.bytes, 0);
  // Overflow: int64 products, 2^31 columns (TMA coordinates are 32-bit); key blocks that are no
  // multiple of 32 or past 256.
  EXPECT_FALSE(fp8_vt_layout(false, 128, int64_t{1} << 20, 1 << 10, 256, int64_t{1} << 30, 0, &l));
  EXPECT_FALSE(fp8_vt_layout(false, 128, 1, 1, 64, int64_t{1} << 31, 0, &l));
  EXPECT_FALSE(fp8_vt_layout(true, 128, int64_t{1} << 60, 1, 64, 0, 1000, &l));
  EXPECT_FALSE(fp8_vt_layout(false, 128, -1, 1, 64, 10, 0, &l));
  EXPECT_FALSE(fp8_vt_layout(true, 128, 1, 1, 64, 0, INT64_MAX - 8, &l));
  EXPECT_FALSE(fp8_vt_layout(false, 0, 1, 1, 64, 10, 0, &l));
  EXPECT_FALSE(fp8_vt_layout(false, 48, 1, 1, 64, 10, 0, &l));
  EXPECT_FALSE(fp8_vt_layout(false, 288, 1, 1, 64, 10, 0, &l));
  std::mt19937_64 rng(derive_seed(77));
  for (int trial = 0; trial < 2000; ++trial) {
    const int block_n = trial % 2 == 0 ? 128 : 192;
    const int64_t batch = 1 + static_cast<int64_t>(rng() % 12);
    std::vector<int64_t> cu(static_cast<size_t>(batch + 1), 0);
    for (int64_t b = 0; b < batch; ++b) cu[b + 1] = cu[b] + static_cast<int64_t>(rng() % 300);
    const int64_t tk = cu[batch] + static_cast<int64_t>(rng() % 40);  // k may have rows past the last sequence
    ASSERT_TRUE(fp8_vt_layout(true, block_n, batch, 2, 64, 0, tk, &l));
    EXPECT_EQ(l.bl, 1);
    EXPECT_EQ(l.cols % 16, 0);
    int64_t prev_end = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t c0 = fp8_vt_col0(cu[b], b, l.pad);
      const int64_t sk = cu[b + 1] - cu[b];  // (seqused_k only shortens it)
      const int64_t end = c0 + (sk + l.pad - 1) / l.pad * l.pad;
      EXPECT_EQ(c0 % 16, 0);
      EXPECT_GE(c0, prev_end) << "sequence " << b << " overlaps the one before";
      EXPECT_LE(end, l.cols) << "sequence " << b << " past the row";
      prev_end = end;
    }
  }
}

TEST(CudaPlan, KernelPreferenceParsing) {
  using fa4::cuda::kernel_name;
  using fa4::cuda::parse_kernel_preference;
  std::optional<Kernel> k;
  for (Kernel want : {Kernel::sm90, Kernel::sm80, Kernel::simt}) {
    ASSERT_TRUE(parse_kernel_preference(kernel_name(want), &k));
    EXPECT_EQ(k, want);
  }
  EXPECT_TRUE(parse_kernel_preference("auto", &k));
  EXPECT_FALSE(k.has_value());
  k = Kernel::sm80;
  EXPECT_TRUE(parse_kernel_preference("", &k));
  EXPECT_FALSE(k.has_value());
  k = Kernel::simt;
  for (const char* bad : {"sm100", "SM80", "sm80 ", "fast"}) {
    EXPECT_FALSE(parse_kernel_preference(bad, &k)) << bad;
    EXPECT_EQ(k, Kernel::simt) << bad;  // untouched
  }
}

// fa4::describe_plan: every backend describes what attention_forward would run.
TEST(DescribePlan, EachBackendDescribesItself) {
  CaseConfig c;
  c.dtype = DType::bfloat16;
  c.batch = 2, c.hq = 6, c.hkv = 2, c.dqk = 32, c.dv = 32, c.sq = 20, c.sk = 700;
  c.num_splits = 0;
  c.num_threads = 2;
  Case t = make_case(c, derive_seed(96000));
  fa4::PlanInfo info;
  ASSERT_TRUE(fa4::describe_plan(t.params(Backend::cpu), &info));
  EXPECT_EQ(info.backend, Backend::cpu);
  EXPECT_TRUE(info.kernel == "amx" || info.kernel == "avx512" || info.kernel == "avx2" || info.kernel == "generic")
      << info.kernel;
  EXPECT_EQ(info.tile_m, 64);  // 20 rows x group 3 = 60, whole 8-row (16-row on AVX-512) groups
  // Keys per bf16 tile: AMX 512, the AVX2 fp32 panels 128 (F32Panels::key_tile), AVX-512 /
  // generic 32.
  EXPECT_EQ(info.tile_n, info.kernel == "amx" ? 512 : info.kernel == "avx2" ? 128 : 32);
  EXPECT_TRUE(info.pack_gqa);
  EXPECT_EQ(info.splits, 1);  // 2 x 2 tiles fill both threads
  // One kv head, one token, 2 threads: two splits (700 keys allow 5 of 4 x 32 keys).
  c.batch = 1, c.hkv = 1, c.sq = 1;
  Case d = make_case(c, derive_seed(96001));
  ASSERT_TRUE(fa4::describe_plan(d.params(Backend::cpu), &info));
  EXPECT_EQ(info.tile_m, 8);   // the row-major decode kernels on every path
  EXPECT_EQ(info.tile_n, 32);
  EXPECT_EQ(info.splits, 2);
  ASSERT_TRUE(fa4::describe_plan(d.params(Backend::reference), &info));
  EXPECT_EQ(info.backend, Backend::reference);
  EXPECT_EQ(info.kernel, "fp64");
  EXPECT_EQ(info.tile_m, 0);
  EXPECT_EQ(info.splits, 1);
}

TEST(DescribePlan, FailsLikeAttentionForwardAndWritesNothing) {
  CaseConfig c;
  c.hq = 4, c.hkv = 3;  // Hq % Hkv != 0
  Case t = make_case(c, derive_seed(96002));
  const std::vector<unsigned char> before = t.out.mem;
  fa4::PlanInfo info;
  info.kernel = "untouched";
  const Status described = fa4::describe_plan(t.params(Backend::cpu), &info);
  const Status forward = fa4::attention_forward(t.params(Backend::cpu));
  EXPECT_EQ(described.code, StatusCode::invalid_argument);
  EXPECT_EQ(described.code, forward.code);
  EXPECT_EQ(described.message, forward.message);
  EXPECT_EQ(info.kernel, "untouched");
  EXPECT_EQ(t.out.mem, before);
  // A valid problem asked of the cuda backend (host tensors here; in a CPU-only build also no
  // backend): the same refusal as attention_forward's.
  Case u = make_case(CaseConfig{}, derive_seed(96003));
  const Status cuda_described = fa4::describe_plan(u.params(Backend::cuda), &info);
  EXPECT_FALSE(cuda_described.ok());
  EXPECT_EQ(cuda_described.message, fa4::attention_forward(u.params(Backend::cuda)).message);
  EXPECT_EQ(info.kernel, "untouched");
}

}  // namespace
}  // namespace fa4test
