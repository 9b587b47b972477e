// The cuda backend's host code -- validation of device tensors, the staging of unaligned rows
// (cuda/stage_rows) and the planner (cuda/plan) -- on hostile but valid problems. Fake device
// pointers and broadcast views (stride 0: no memory behind them) may claim any shape whose
// strided extents fit int64, so every size these compute from the shapes must be overflow-checked:
// the sanitizer build (scripts/sanitize.sh) turns a signed overflow here into a failure, and two
// such overflows were found this way (the staged copy's bytes, the forced splits' workspace).
// Nothing is dereferenced and no CUDA runtime is needed: this runs in the CPU-only build.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "core/checked.h"
#include "core/problem.h"
#include "cuda/plan.h"
#include "cuda/stage_rows.h"

namespace {

using fa4::AttentionParams;
using fa4::DType;
using fa4::TensorView;
namespace core = fa4::core;
namespace cuda = fa4::cuda;

// Sizes at the edges: empty, tiny, the CUDA grid limits, int32's, and far beyond any memory.
constexpr std::array<int64_t, 14> kSizes = {0, 1, 2, 3, 7, 64, 65535, 65536, 1 << 20, (int64_t{1} << 31) - 1,
                                            int64_t{1} << 31, int64_t{1} << 40, int64_t{1} << 50,
                                            int64_t{1} << 62};
constexpr std::array<int64_t, 7> kDims = {1, 8, 59, 64, 128, 192, 256};

struct Gen {
  std::mt19937_64 rng;
  int64_t pick(int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); }
  bool coin(int in = 2) { return pick(in) == 0; }
  int64_t size() { return kSizes[static_cast<size_t>(pick(kSizes.size()))]; }
  int64_t small_size() { return kSizes[static_cast<size_t>(pick(7))]; }
  int64_t dim() { return kDims[static_cast<size_t>(pick(kDims.size()))]; }

  // A device tensor of this shape at a fake address: contiguous where its strides fit int64, else
  // (or at random) a broadcast view; at random a misaligned pointer or a strided last dim (both
  // stage it), or one huge stride.
  TensorView tensor(uintptr_t at, DType t, std::vector<int64_t> shape) {
    TensorView v;
    v.data = reinterpret_cast<void*>(at);
    v.dtype = t;
    v.device = fa4::DeviceType::cuda;
    v.ndim = static_cast<int32_t>(shape.size());
    int64_t s = 1;
    bool fits = true;
    for (int i = v.ndim - 1; i >= 0; --i) {
      v.shape[i] = shape[static_cast<size_t>(i)];
      v.stride[i] = s;
      fits = fits && core::checked_mul(s, std::max<int64_t>(1, v.shape[i]), &s);
    }
    const int64_t kind = pick(6);
    if (!fits || kind == 0)
      for (int i = 0; i < v.ndim; ++i) v.stride[i] = 0;
    else if (kind == 1)
      v.stride[pick(v.ndim)] = int64_t{1} << (20 + pick(43));
    else if (kind == 2)
      v.stride[v.ndim - 1] = 2;
    if (coin(4)) v.data = reinterpret_cast<void*>(at + static_cast<uintptr_t>(fa4::dtype_size(t)));
    return v;
  }
};

// The device facts the planner may see: an H200 (automatic, and under FA4_CUDA_KERNEL=sm80), a
// 99 KB sm_86, and an unknown device (attention_workspace_size plans without a query).
std::vector<cuda::DeviceLimits> devices() {
  cuda::DeviceLimits h200;
  h200.known = true;
  h200.sms = 132, h200.cc_major = 9, h200.cc_minor = 0;
  h200.smem_optin = 232448, h200.smem_per_sm = 233472;
  h200.l2_bytes = 60 << 20;
  cuda::DeviceLimits sm80 = h200;
  sm80.prefer = cuda::Kernel::sm80;
  cuda::DeviceLimits ampere;
  ampere.known = true;
  ampere.sms = 82, ampere.cc_major = 8, ampere.cc_minor = 6;
  ampere.smem_optin = 101376, ampere.smem_per_sm = 102400;
  return {h200, sm80, ampere, cuda::DeviceLimits{}};
}

void expect_sane(const core::Problem& pb, const cuda::Plan& pl, const char* what, uint64_t seed) {
  EXPECT_GE(pl.splits, 1) << what << " seed " << seed;
  EXPECT_GE(pl.grid.x, 0) << what << " seed " << seed;
  EXPECT_GE(pl.grid.y, 0) << what << " seed " << seed;
  EXPECT_GE(pl.grid.z, 0) << what << " seed " << seed;
  EXPECT_GE(pl.smem, 0) << what << " seed " << seed;
  if (pl.splits > 1 && pl.rows_total > 0 && pb.hq > 0) {  // (an empty problem has no partials)
    EXPECT_GT(pl.workspace, 0u) << what << " seed " << seed;
  }
}

TEST(CudaHostLimits, HostileShapesValidateStageAndPlanWithoutOverflow) {
  const std::vector<cuda::DeviceLimits> dls = devices();
  int accepted = 0, staged = 0, split = 0;
  const uint64_t n = 4000;
  for (uint64_t seed = 0; seed < n; ++seed) {
    Gen g{std::mt19937_64(seed * 0x9E3779B97F4A7C15ull + 1)};
    const DType dt = std::array{DType::bfloat16, DType::float16, DType::float8_e4m3, DType::float32}[g.pick(4)];
    const bool kv_fp8 = dt != DType::float8_e4m3 && dt != DType::float32 && g.coin(6);
    const DType kvt = kv_fp8 ? DType::float8_e4m3 : dt;
    const DType out_t = dt == DType::float8_e4m3 ? DType::bfloat16 : dt;
    const int64_t b = g.size(), sq = g.size(), sk = g.size(), hkv = g.small_size();
    const int64_t hq = hkv * (g.coin() ? 1 : std::array<int64_t, 3>{2, 4, 8}[g.pick(3)]);
    const int64_t d = g.dim(), dv = dt == DType::float8_e4m3 || g.coin() ? d : g.dim();
    const bool varlen = g.coin(5), paged = !varlen && g.coin(5), cache = !varlen && !paged && g.coin(5);

    AttentionParams p;
    p.backend = fa4::Backend::cuda;
    const int64_t tq = varlen ? g.size() : 0;  // packed q tokens
    p.q = varlen ? g.tensor(1u << 30, dt, {tq, hq, d}) : g.tensor(1u << 30, dt, {b, sq, hq, d});
    p.out = varlen ? g.tensor(3u << 30, out_t, {tq, hq, dv}) : g.tensor(3u << 30, out_t, {b, sq, hq, dv});
    const int64_t page = std::array<int64_t, 4>{1, 16, 64, 256}[g.pick(4)];
    const int64_t pages = paged ? g.small_size() : 0;
    const int64_t rows0 = paged ? g.size() : b;  // k's dim 0: sequences, or pages of the pool
    p.k = g.tensor(5u << 30, kvt, {rows0, paged ? page : sk, hkv, d});
    p.v = g.tensor(7u << 30, kvt, {rows0, paged ? page : sk, hkv, dv});
    if (g.coin(3)) p.lse = g.tensor(9u << 30, DType::float32, {b, hq, sq});
    if (varlen) {
      p.cu_seqlens_q = g.tensor(11u << 30, DType::int32, {b + 1});
      p.max_seqlen_q = g.coin() ? g.size() : 0;
    }
    if (paged) p.page_table = g.tensor(13u << 30, DType::int32, {b, pages});
    if (paged || cache) p.cache_seqlens = g.tensor(15u << 30, DType::int32, {b});
    if (kv_fp8) {
      p.k_descale = g.tensor(17u << 30, DType::float32, {b, hkv});
      p.v_descale = g.tensor(19u << 30, DType::float32, {b, hkv});
    }
    p.causal = g.coin(3);
    if (!p.causal && g.coin(4)) p.window_left = g.size(), p.window_right = g.coin() ? 0 : g.size();
    p.num_splits = static_cast<int32_t>(std::array<int64_t, 6>{0, 0, 1, 2, 100, 1000}[g.pick(6)]);
    p.max_seqlen_k = g.coin(3) ? g.size() : 0;

    core::Problem pb;
    if (!core::normalize(p, &pb)) continue;
    ++accepted;
    for (const cuda::DeviceLimits& dl : dls) {
      const cuda::Plan pl = cuda::make_plan(pb, dl);
      expect_sane(pb, pl, "plan", seed);
      split += pl.splits > 1;
    }
    if (pb.gpu_stage != 0) {
      cuda::StagedCall sc;
      if (!sc.build(pb, nullptr)) continue;
      ++staged;
      EXPECT_EQ(sc.problem().gpu_stage, 0u) << "seed " << seed;
      for (const cuda::DeviceLimits& dl : dls) expect_sane(sc.problem(), cuda::make_plan(sc.problem(), dl), "staged plan", seed);
    }
  }
  // Not vacuous: a good share of the problems pass validation, some are staged, some split.
  EXPECT_GT(accepted, static_cast<int>(n / 10));
  EXPECT_GT(staged, static_cast<int>(n / 100));
  EXPECT_GT(split, 0);
  std::printf("accepted %d of %d, staged %d, split plans %d\n", accepted, static_cast<int>(n), staged, split);
}

}  // namespace
