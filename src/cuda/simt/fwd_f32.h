// Host interface of the fp32 forward kernel (src/cuda/simt/fwd_f32.cu): a plain SIMT
// (CUDA-core, no tensor cores) kernel for float32 q / k / v / out with fp32-level accuracy, every
// feature of the sm80 kernel (masks, softcap, sinks, GQA / PackGQA, varlen, seqused_k, KV cache +
// batch index, paged KV of any page size, split-KV partials, lse, any Dqk, Dv <= 256).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/fwd_args.h"
#include "cuda/simt/fwd_f32_config.h"

namespace fa4::cuda::simt {

// Launches the fp32 kernel on `stream` over `grid`, the decomposition of the sm80 kernel (the
// backend plans both): grid.y = heads (hkv with PackGQA, else hq); grid.x = the row blocks of
// kF32Rows tile rows of the longest sequence (x group with PackGQA) and grid.z = batch x
// num_splits, or with p.varlen_tiles grid.x = an upper bound on the row blocks of all sequences
// back to back (find_varlen_tile) and grid.z = num_splits. With p.num_splits > 1 the kernel
// writes fp32 partials to p.o_part / p.lse_part (row stride p.dv_pad) exactly like the sm80
// kernel; src/cuda/combine merges them.
// Returns cudaErrorInvalidConfiguration when the device's shared memory cannot hold the tile.
cudaError_t launch_fwd_f32(const FwdArgs& p, dim3 grid, cudaStream_t stream);

}  // namespace fa4::cuda::simt
