// Instantiates and launches the sm80 forward kernel for one head-dim pair (included by the
// fwd_dXXX.cu files only).
#pragma once

#include <atomic>

#include "cuda/common/smem_optin.h"
#include "cuda/sm80/fwd_kernel.cuh"
#include "cuda/sm80/fwd_launch.h"

namespace fa4::cuda::sm80 {
// Internal linkage on purpose: a function-local static in a template with external linkage
// becomes a process-wide STB_GNU_UNIQUE symbol, so a second libfa4 loaded into the same process
// (an A/B build, another package's copy) would share `configured` with the first, skip its own
// cudaFuncSetAttribute and fail every launch over 48 KiB of shared memory ("invalid argument").
namespace {

template <typename Elem, int Dqk, int Dv, Tile kTile, Inst kInst>
cudaError_t launch_instance(const FwdArgs& p, dim3 grid, cudaStream_t stream) {
  constexpr TileCfg c = tile_cfg(kTile, Dqk, Dv);
  using T = FwdTraits<Elem, Dqk, Dv, c.m, c.n, c.warps_m, c.warps_n, c.stages, c.pair_dv>;
  static std::atomic<bool> configured[64] = {};
  const cudaError_t err = ensure_smem_optin(reinterpret_cast<const void*>(fwd_kernel<T, kInst>), T::kSmemBytes, configured);
  if (err != cudaSuccess) return err;
  fwd_kernel<T, kInst><<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <typename Elem, int Dqk, int Dv, Tile kTile>
cudaError_t launch_features(const FwdArgs& p, dim3 grid, cudaStream_t stream) {
  // The common instance has no softcap, paged-KV or varlen-tile code (smaller, uniform-register
  // addressing); varlen q without softcap / paging takes the varlen instance (prefill tiles only:
  // varlen decode is rare enough not to be worth another instance); everything else the general.
  // The compact tile (small-shared-memory GPUs) has the general instance only.
  constexpr bool kDecode = kTile == Tile::decode;
  const bool general = p.softcap_log2 != 0.f || p.kv_mode == kKvPaged;
  if (kTile == Tile::compact || general || (kDecode && p.varlen_tiles))
    return launch_instance<Elem, Dqk, Dv, kTile, Inst::general>(p, grid, stream);
  if constexpr (kTile == Tile::prefill) {
    if (p.varlen_tiles) return launch_instance<Elem, Dqk, Dv, kTile, Inst::varlen>(p, grid, stream);
  }
  return launch_instance<Elem, Dqk, Dv, kTile, Inst::common>(p, grid, stream);
}

template <typename Elem, int Dqk, int Dv>
cudaError_t launch_tile(const FwdArgs& p, Tile tile, dim3 grid, cudaStream_t stream) {
  switch (tile) {
    case Tile::prefill: return launch_features<Elem, Dqk, Dv, Tile::prefill>(p, grid, stream);
    case Tile::decode: return launch_features<Elem, Dqk, Dv, Tile::decode>(p, grid, stream);
    case Tile::compact:
      if constexpr (has_compact(Dqk, Dv)) {
        return launch_features<Elem, Dqk, Dv, Tile::compact>(p, grid, stream);
      } else {
        return cudaErrorInvalidConfiguration;  // the planner only picks compact where it exists
      }
  }
  return cudaErrorInvalidValue;
}

template <int Dqk, int Dv>
cudaError_t launch_dims(const FwdArgs& p, bool bf16, Tile tile, dim3 grid, cudaStream_t stream) {
  return bf16 ? launch_tile<__nv_bfloat16, Dqk, Dv>(p, tile, grid, stream)
              : launch_tile<__half, Dqk, Dv>(p, tile, grid, stream);
}

}  // namespace
}  // namespace fa4::cuda::sm80
