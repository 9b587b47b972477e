// Instantiates and launches the sm90 forward kernel for one head dim (included by the
// fwd_dXXX.cu files only).
#pragma once

#include "cuda/sm90/fwd_kernel.cuh"
#include "cuda/sm90/fwd_launch.h"

namespace fa4::cuda::sm90 {
// Internal linkage on purpose (as in sm80/fwd_launch_impl.cuh): a function-local static of an
// externally visible template becomes a process-wide STB_GNU_UNIQUE symbol shared by every
// libfa4 in the process.
namespace {

template <typename Elem, int Dqk, int Dv>
cudaError_t launch_instance(const Sm90Params& P, dim3 grid, cudaStream_t stream) {
  using T = FwdTraits<Elem, Dqk, Dv>;
  static bool configured[64] = {};
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev < 64 && !configured[dev]) {
    err = cudaFuncSetAttribute(fwd_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
    if (err != cudaSuccess) return err;
    configured[dev] = true;
  }
  fwd_kernel<T><<<grid, T::kThreads, T::kSmemBytes, stream>>>(P);
  return cudaGetLastError();
}

template <int Dqk, int Dv = Dqk>
cudaError_t launch_dims(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream) {
  return bf16 ? launch_instance<__nv_bfloat16, Dqk, Dv>(P, grid, stream)
              : launch_instance<__half, Dqk, Dv>(P, grid, stream);
}

}  // namespace
}  // namespace fa4::cuda::sm90
