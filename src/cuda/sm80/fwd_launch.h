// Host interface of the sm80 kernel instantiations (one .cu file per head-dim pair, so a
// parallel build compiles them side by side).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/fwd_args.h"
#include "cuda/sm80/fwd_configs.h"

namespace fa4::cuda::sm80 {

// Head-dim pairs with a kernel (cuda/plan.cpp pads other dims up to one of these).
struct DimPair {
  int dqk, dv;
};

// Launches the kernel for (dims, dtype, config). grid = (m_blocks, heads, batch * splits).
// Returns cudaErrorInvalidConfiguration when the device's shared memory cannot hold the config.
cudaError_t launch_fwd(const FwdArgs& p, DimPair dims, bool bf16, Tile tile, dim3 grid, cudaStream_t stream);

// Per-dim entry points (fwd_dXXX.cu).
cudaError_t launch_fwd_d64(const FwdArgs& p, bool bf16, Tile tile, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d128(const FwdArgs& p, bool bf16, Tile tile, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d192(const FwdArgs& p, bool bf16, Tile tile, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d256(const FwdArgs& p, bool bf16, Tile tile, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d192_128(const FwdArgs& p, bool bf16, Tile tile, dim3 grid, cudaStream_t stream);

// The fp8 instances (mode kv: e4m3 K / V, bf16 says q's dtype; mode all: e4m3 q / k / v, bf16
// compute and output), prefill and decode tiles (compact: cudaErrorInvalidConfiguration).
cudaError_t launch_fwd_fp8(const FwdArgsFp8& p, DimPair dims, Fp8 mode, bool bf16, Tile tile, dim3 grid,
                           cudaStream_t stream);
cudaError_t launch_fwd_fp8_d64(const FwdArgsFp8& p, Fp8 mode, bool bf16, Tile tile, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_fp8_d128(const FwdArgsFp8& p, Fp8 mode, bool bf16, Tile tile, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_fp8_d192(const FwdArgsFp8& p, Fp8 mode, bool bf16, Tile tile, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_fp8_d256(const FwdArgsFp8& p, Fp8 mode, bool bf16, Tile tile, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_fp8_d192_128(const FwdArgsFp8& p, Fp8 mode, bool bf16, Tile tile, dim3 grid,
                                    cudaStream_t stream);

}  // namespace fa4::cuda::sm80
