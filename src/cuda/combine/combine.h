// Split-KV combine: merges fp32 partials (O_s normalized, lse_s natural log) into the output.
//   lse = log sum_s exp(lse_s),   O = sum_s exp(lse_s - lse) * O_s
// A row whose partial lse are all -inf yields O = 0, lse = -inf.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/fwd_args.h"

namespace fa4::cuda {

cudaError_t launch_combine(const CombineArgs& a, cudaStream_t stream);

}  // namespace fa4::cuda
