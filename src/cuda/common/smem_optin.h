// A kernel's opt-in to more than 48 KiB of dynamic shared memory, once per device: the
// attribute is per (function, device), and cudaFuncSetAttribute is not a stream operation, so
// setting it at the first launch stays CUDA-graph safe.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

namespace fa4::cuda {

// `configured`: the caller's per-device flags, a function-local static of its launch function
// (one per kernel instance; internal linkage, sm80/fwd_launch_impl.cuh says why). Atomic: host
// threads may launch the same instance at once. Devices past 64 set the attribute every time.
// cudaErrorInvalidConfiguration: the device cannot give `bytes` to one block.
inline cudaError_t ensure_smem_optin(const void* kernel, int bytes, std::atomic<bool> (&configured)[64]) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  const bool tracked = dev >= 0 && dev < 64;
  if (tracked && configured[dev].load(std::memory_order_acquire)) return cudaSuccess;
  int optin = 0;
  err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (err != cudaSuccess) return err;
  if (optin < bytes) return cudaErrorInvalidConfiguration;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) return err;
  if (tracked) configured[dev].store(true, std::memory_order_release);
  return cudaSuccess;
}

}  // namespace fa4::cuda
