// Head-dim padding and the per-dim dispatch of the sm80 kernel.
#include "cuda/sm80/fwd_launch.h"

namespace fa4::cuda::sm80 {
namespace {
int pad_dim(int d) { return d <= 64 ? 64 : d <= 128 ? 128 : d <= 192 ? 192 : 256; }
}  // namespace

DimPair padded_dims(int dqk, int dv) {
  const int pq = pad_dim(dqk), pv = pad_dim(dv);
  if (pq == 192 && pv <= 128) return {192, 128};
  const int d = pq > pv ? pq : pv;
  return {d, d};
}

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

}  // namespace fa4::cuda::sm80
