// The cuda backend's planner (DESIGN §3): Plan = f(Problem, device facts). Which kernel runs, on
// which tile, with PackGQA or not, how many KV splits, the grid and the split workspace.
//
// A pure function of the validated problem and a plain struct of device facts: no CUDA runtime
// calls here (backend.cpp queries the device and reads FA4_CUDA_KERNEL), so this file is compiled
// into the CPU-only build's tests/test_plan and the planner is unit-tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/problem.h"
#include "cuda/common/tile_schedule.h"
#include "cuda/sm80/fwd_configs.h"
#include "cuda/sm90/fp8_layout.h"
#include "cuda/sm90/fwd_config.h"

namespace fa4::cuda {

// The forward kernels of the cuda backend:
//   sm90  Hopper fast path (TMA + wgmma + warp specialization, src/cuda/sm90), sm_90 only;
//   sm80  portable mma.sync + cp.async kernel (src/cuda/sm80), fp16 / bf16 and e4m3 (all-fp8
//         or an fp8 KV cache), every feature;
//   simt  CUDA-core fp32 kernel (src/cuda/simt), float32 inputs.
enum class Kernel { sm90, sm80, simt };
const char* kernel_name(Kernel k);  // "sm90", "sm80", "simt"

// The value of FA4_CUDA_KERNEL: "sm90", "sm80" or "simt" name a preferred kernel; "" and "auto"
// mean none. Returns false (and leaves *out alone) for anything else.
bool parse_kernel_preference(std::string_view value, std::optional<Kernel>* out);

// What the planner knows about the device, queried once per device by backend.cpp.
struct DeviceLimits {
  // false: the device could not be queried. The plan then assumes every tile fits and picks no
  // heuristic split count (only attention_workspace_size plans such a problem; cuda_check
  // refuses it).
  bool known = false;
  int sms = 0;                // multiprocessors
  int cc_major = 0, cc_minor = 0;
  int smem_optin = 0;         // bytes of shared memory one block may opt in to (FA4_CUDA_SMEM_OPTIN may cap it)
  int smem_per_sm = 0;        // bytes of shared memory per SM
  int64_t l2_bytes = 0;       // L2 cache (0: unknown; the persistent schedule then assumes 40 MB)
  // FA4_CUDA_KERNEL: used wherever that kernel supports the problem, else the automatic choice.
  std::optional<Kernel> prefer;
};

// CUDA grid extents of the attention launch (checked against the launch limits by cuda_check).
struct Grid {
  int64_t x = 0;  // query tiles per (batch, head), or with varlen tiles an upper bound on all sequences' tiles
  int64_t y = 0;  // heads: Hkv with PackGQA, else Hq
  int64_t z = 0;  // batch x splits (splits alone with varlen tiles)
};

// Everything the launch needs that depends only on shapes (not on device data).
struct Plan {
  Kernel kernel = Kernel::sm80;
  int dqk = 0, dv = 0;  // the kernel instance's head dims: sm80 pads up to an instantiated pair,
                        // simt uses the actual ones. dv is the split partials' row stride.
  sm80::Tile sm80_tile = sm80::Tile::prefill;  // kernel == sm80: which of its tiles
  sm80::Fp8 sm80_fp8 = sm80::Fp8::none;         // kernel == sm80: its fp8 instances (e4m3 K / V, or Q / K / V)
  sm90::Tile sm90_tile = sm90::Tile::standard;  // kernel == sm90: which of its tiles
  int m = 0, n = 0;     // tile: m query rows ((row, head) pairs with PackGQA) x n keys
  int smem = 0;         // bytes of dynamic shared memory per CTA
  bool pack_gqa = false;   // the group's query heads share a tile (rows = Sq x group per kv head)
  int64_t rows = 0;        // tile rows per (batch, grid head): max_sq, or max_sq x group with PackGQA
  bool varlen_tiles = false;  // varlen q: grid.x walks the tiles of all sequences back to back
  int splits = 1;          // KV splits (1 = none)
  int64_t rows_total = 0;  // token rows of q (all sequences)
  size_t workspace = 0;    // bytes of fp32 split partials (O and lse), then the fp8 V^T; 0 without either
  // kernel == sm90, an fp8 tile (Tile::fp8, fp8_long_keys): the V^T workspace its pre-pass writes
  // (sm90/fp8_layout.h), at byte fp8_vt_offset of the workspace (after any split partials, 256-byte
  // aligned).
  sm90::Fp8VtLayout fp8_vt;
  size_t fp8_vt_offset = 0;
  // kernel == sm90, sched.balanced_n > 0: the balanced walk's piece states (sm90/fwd_params.h
  // piece_state) at this byte of the workspace, after everything else there.
  size_t piece_state_offset = 0;
  Grid grid;               // the tiles; sm90 launches `ctas` persistent CTAs that walk them
  TileSchedule sched;      // sm90: the order they walk them in (common/tile_schedule.h)
  int64_t ctas = 0;        // sm90: CTAs launched (grid.x, with grid.y = grid.z = 1)
  bool sm90_solo = false;  // sm90 (sm90::solo_capable tiles): every tile has <= 64 rows, consumer 0 runs alone
  bool sm90_one_q = false;  // sm90 (sm90::one_q_capable tiles): every tile has <= 64 rows, the 1Q tile
                            // (both consumers on one Q tile, key tiles even / odd; before solo)
  // sm90 (FA4_SM90_PAGED_GATHER): the tile's gather instance (sm90/fwd_gather.h) -- a paged cache
  // the TMA loads do not take, its K / V rows copied by the producer warpgroup
  bool sm90_gather = false;
  // sm90 fp8_kv (FA4_SM90_DECODE_KEYS_M): the keys-on-M decode kernel runs the call instead of the
  // tile (sm90/decode_kv.h): its own grid (batch x hkv x splits); PlanInfo's tile is 8 or 16 x 128.
  bool sm90_decode_keys_m = false;
};

// The sm90 kernel's feature set. The lead's kernel fills this in; false until it lands.
bool sm90_supports(const core::Problem& pb, const DeviceLimits& dl);

Plan make_plan(const core::Problem& pb, const DeviceLimits& dl);

// The largest per-CTA load of the static persistent schedule `s` on `ctas` CTAs when tile
// (x, y, z) costs cost_x[x] (x as the kernel takes it: under a causal mask x = 0 is the heaviest
// query tile): the planner's model for choosing the sm90 order of short masked sequences
// (cuda/plan.cpp balance_static_order). cost_x.size() == s.gx.
int64_t static_makespan(const TileSchedule& s, int64_t ctas, const std::vector<int64_t>& cost_x);

}  // namespace fa4::cuda
