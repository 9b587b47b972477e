// Host interface of the sm90 kernel's gather instances (fwd_gather.h, FA4_SM90_PAGED_GATHER): the
// same parameters as fwd_launch.h's launch_fwd (make_params builds them; the K / V tensor maps
// go unused). Each is compiled beside its TMA twin (fwd_d64_short_masked.cu, fwd_d64_split_kv.cu,
// fwd_d128.cu, fwd_d128_split_kv.cu, fwd_d256.cu, fwd_d256_split_kv.cu): the sources a main build
// already has, so a variant staged against it (bench/stage_sm90_variant.sh, stage_ab.sh --fast)
// links them.
#pragma once

#include <cuda_runtime.h>

#include "cuda/sm90/fwd_config.h"
#include "cuda/sm90/fwd_gather.h"
#include "cuda/sm90/fwd_params.h"

namespace fa4::cuda::sm90 {

cudaError_t launch_fwd_d64_gather(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d64_split_kv_gather(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d128_gather(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d128_split_kv_gather(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d256_gather(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d256_split_kv_gather(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);

// The gather instance of (dims, tile); cudaErrorInvalidValue where there is none
// (has_gather_instance).
inline cudaError_t launch_fwd_gather(const Sm90Params& P, DimPair dims, Tile tile, bool bf16, dim3 grid,
                                     cudaStream_t stream) {
  if (!has_gather_instance(dims.dqk, dims.dv, tile)) return cudaErrorInvalidValue;
  const bool split = tile == Tile::split_kv;
  switch (dims.dqk) {
    case 64: return split ? launch_fwd_d64_split_kv_gather(P, bf16, grid, stream) : launch_fwd_d64_gather(P, bf16, grid, stream);
    case 128:
      return split ? launch_fwd_d128_split_kv_gather(P, bf16, grid, stream) : launch_fwd_d128_gather(P, bf16, grid, stream);
    case 256:
      return split ? launch_fwd_d256_split_kv_gather(P, bf16, grid, stream) : launch_fwd_d256_gather(P, bf16, grid, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace fa4::cuda::sm90
