// Instantiates and launches the sm80 kernel's fp8 instances for one head-dim pair (included by
// the fwd_fp8_dXXX.cu files only): e4m3 K / V under bf16 or fp16 q (Inst::fp8_kv), all-e4m3
// q / k / v with bf16 compute and output (Inst::fp8); prefill and decode tiles (no compact tile:
// the fp8 ring does not fit sm_86 / sm_89's 99 KB where only the compact tile would, so the
// planner never picks it for fp8).
#pragma once

#include <atomic>

#include "cuda/common/smem_optin.h"
#include "cuda/sm80/fwd_kernel.cuh"
#include "cuda/sm80/fwd_launch.h"

namespace fa4::cuda::sm80 {
// Internal linkage: see fwd_launch_impl.cuh (the `configured` flags must not be process-wide).
namespace {

template <typename Elem, int Dqk, int Dv, Tile kTile, Inst kInst>
cudaError_t launch_fp8_instance(const FwdArgsFp8& p, dim3 grid, cudaStream_t stream) {
  constexpr TileCfg c = tile_cfg(kTile, Dqk, Dv);
  using T = FwdTraits<Elem, Dqk, Dv, c.m, c.n, c.warps_m, c.warps_n, c.stages, c.pair_dv>;
  static std::atomic<bool> configured[64] = {};
  const cudaError_t err =
      ensure_smem_optin(reinterpret_cast<const void*>(fwd_kernel<T, kInst, FwdArgsFp8>), T::kSmemBytesFp8, configured);
  if (err != cudaSuccess) return err;
  fwd_kernel<T, kInst, FwdArgsFp8><<<grid, T::kThreads, T::kSmemBytesFp8, stream>>>(p);
  return cudaGetLastError();
}

template <typename Elem, int Dqk, int Dv, Inst kInst>
cudaError_t launch_fp8_tile(const FwdArgsFp8& p, Tile tile, dim3 grid, cudaStream_t stream) {
  switch (tile) {
    case Tile::prefill: return launch_fp8_instance<Elem, Dqk, Dv, Tile::prefill, kInst>(p, grid, stream);
    case Tile::decode: return launch_fp8_instance<Elem, Dqk, Dv, Tile::decode, kInst>(p, grid, stream);
    case Tile::compact: return cudaErrorInvalidConfiguration;
  }
  return cudaErrorInvalidValue;
}

template <int Dqk, int Dv>
cudaError_t launch_fp8_dims(const FwdArgsFp8& p, Fp8 mode, bool bf16, Tile tile, dim3 grid, cudaStream_t stream) {
  switch (mode) {
    case Fp8::all: return launch_fp8_tile<__nv_bfloat16, Dqk, Dv, Inst::fp8>(p, tile, grid, stream);
    case Fp8::kv:
      return bf16 ? launch_fp8_tile<__nv_bfloat16, Dqk, Dv, Inst::fp8_kv>(p, tile, grid, stream)
                  : launch_fp8_tile<__half, Dqk, Dv, Inst::fp8_kv>(p, tile, grid, stream);
    case Fp8::none: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace
}  // namespace fa4::cuda::sm80
