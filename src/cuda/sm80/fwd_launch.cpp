// The per-dim dispatch of the sm80 kernel (the head-dim padding rule is the planner's:
// cuda/plan.cpp, sm80_dims).
#include "cuda/sm80/fwd_launch.h"

namespace fa4::cuda::sm80 {

cudaError_t launch_fwd(const FwdArgs& p, DimPair dims, bool bf16, Tile tile, dim3 grid, cudaStream_t stream) {
  if (dims.dqk == 192 && dims.dv == 128) return launch_fwd_d192_128(p, bf16, tile, grid, stream);
  switch (dims.dqk) {
    case 64: return launch_fwd_d64(p, bf16, tile, grid, stream);
    case 128: return launch_fwd_d128(p, bf16, tile, grid, stream);
    case 192: return launch_fwd_d192(p, bf16, tile, grid, stream);
    case 256: return launch_fwd_d256(p, bf16, tile, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_fwd_fp8(const FwdArgsFp8& p, DimPair dims, Fp8 mode, bool bf16, Tile tile, dim3 grid,
                           cudaStream_t stream) {
  if (dims.dqk == 192 && dims.dv == 128) return launch_fwd_fp8_d192_128(p, mode, bf16, tile, grid, stream);
  switch (dims.dqk) {
    case 64: return launch_fwd_fp8_d64(p, mode, bf16, tile, grid, stream);
    case 128: return launch_fwd_fp8_d128(p, mode, bf16, tile, grid, stream);
    case 192: return launch_fwd_fp8_d192(p, mode, bf16, tile, grid, stream);
    case 256: return launch_fwd_fp8_d256(p, mode, bf16, tile, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fa4::cuda::sm80
