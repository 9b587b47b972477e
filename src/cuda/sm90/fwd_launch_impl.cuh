// Instantiates and launches the sm90 forward kernel for one head dim (included by the
// fwd_dXXX.cu files only).
#pragma once

#include <atomic>

#include "cuda/common/smem_optin.h"
#include "cuda/sm90/fwd_kernel.cuh"
#include "cuda/sm90/fwd_launch.h"

#if FA4_SM90_TRACE
#include <cstdio>
#include <cstdlib>
#include <vector>
#endif

namespace fa4::cuda::sm90 {
// Internal linkage on purpose (as in sm80/fwd_launch_impl.cuh): a function-local static of an
// externally visible template becomes a process-wide STB_GNU_UNIQUE symbol shared by every
// libfa4 in the process.
namespace {

#if FA4_SM90_TRACE
// bench/sm90_trace.py's timeline (fwd_trace.cuh): the launch with a zeroed record buffer, waited
// for, and the records written to `file` (replaced each launch: the last one is read) behind a
// header of 16 int64: magic, grid, consumers, block_m, block_n, dqk, dv, max roles, max tiles,
// slots, header words, CTA stride, kernel time (ns, events around the launch).
template <class T>
cudaError_t launch_traced(const Sm90Params& P, dim3 grid, cudaStream_t stream, const char* file) {
  static uint64_t* buf = nullptr;
  static size_t cap = 0;
  const size_t words = static_cast<size_t>(grid.x) * trace::kCtaStride;
  cudaError_t err = cudaSuccess;
  if (words > cap) {
    if (buf != nullptr) cudaFree(buf);
    buf = nullptr, cap = 0;
    if ((err = cudaMalloc(&buf, words * 8)) != cudaSuccess) return err;
    cap = words;
  }
  if ((err = cudaMemsetAsync(buf, 0, words * 8, stream)) != cudaSuccess) return err;
  Sm90Params Pt = P;
  Pt.trace = buf;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  cudaEventRecord(e0, stream);
  fwd_kernel<T><<<grid, T::kThreads, T::kSmemBytes, stream>>>(Pt);
  cudaEventRecord(e1, stream);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  if ((err = cudaStreamSynchronize(stream)) != cudaSuccess) return err;
  float ms = 0.f;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  std::vector<uint64_t> host(words);
  if ((err = cudaMemcpy(host.data(), buf, words * 8, cudaMemcpyDeviceToHost)) != cudaSuccess) return err;
  const int64_t hdr[16] = {0x66613474726163, static_cast<int64_t>(grid.x), T::kConsumers, T::kBlockM, T::kBlockN,
                           T::kDqk, T::kDv, trace::kMaxRoles, trace::kMaxTiles, trace::kSlots, trace::kHeader,
                           trace::kCtaStride, static_cast<int64_t>(ms * 1e6), 0, 0, 0};
  if (FILE* f = std::fopen(file, "wb")) {
    std::fwrite(hdr, sizeof hdr, 1, f);
    std::fwrite(host.data(), 8, words, f);
    std::fclose(f);
  }
  return cudaSuccess;
}
#endif

template <class T>
cudaError_t launch_traits(const Sm90Params& P, dim3 grid, cudaStream_t stream) {
  static std::atomic<bool> configured[64] = {};
  const cudaError_t err = ensure_smem_optin(reinterpret_cast<const void*>(fwd_kernel<T>), T::kSmemBytes, configured);
  if (err != cudaSuccess) return err;
#if FA4_SM90_TRACE
  if (const char* file = std::getenv("FA4_SM90_TRACE_FILE")) return launch_traced<T>(P, grid, stream, file);
#endif
  if (FA4_SM90_PDL) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = dim3(T::kThreads), cfg.dynamicSmemBytes = T::kSmemBytes, cfg.stream = stream;
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr, cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, fwd_kernel<T>, P);
  }
  fwd_kernel<T><<<grid, T::kThreads, T::kSmemBytes, stream>>>(P);
  return cudaGetLastError();
}

template <typename Elem, int Dqk, int Dv, Tile kTile>
cudaError_t launch_instance(const Sm90Params& P, dim3 grid, cudaStream_t stream) {
  return launch_traits<FwdTraits<Elem, Dqk, Dv, kTile>>(P, grid, stream);
}

template <int Dqk, int Dv = Dqk, Tile kTile = Tile::standard>
cudaError_t launch_dims(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream) {
  return bf16 ? launch_instance<__nv_bfloat16, Dqk, Dv, kTile>(P, grid, stream)
              : launch_instance<__half, Dqk, Dv, kTile>(P, grid, stream);
}

// The gather instance of tile kTile at Dqk = Dv = D (FA4_SM90_PAGED_GATHER, fwd_gather.h).
template <int D, Tile kTile>
cudaError_t launch_gather_dims(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream) {
  return bf16 ? launch_traits<GatherTraits<FwdTraits<__nv_bfloat16, D, D, kTile>>>(P, grid, stream)
              : launch_traits<GatherTraits<FwdTraits<__half, D, D, kTile>>>(P, grid, stream);
}

}  // namespace
}  // namespace fa4::cuda::sm90
