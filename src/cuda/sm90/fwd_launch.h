// Host interface of the sm90 forward kernel (one .cu file per head dim instantiates it).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/fwd_args.h"
#include "cuda/sm90/fp8_layout.h"
#include "cuda/sm90/fwd_config.h"
#include "cuda/sm90/fwd_params.h"

namespace fa4::cuda::sm90 {

// Encodes the q / k / v tensor maps for `a` (fwd_params.h). False, with the reason, when a
// tensor's strides or extents do not fit TMA's rules (16-byte multiples, < 2^40 bytes, extents
// < 2^32); the planner (cuda/plan.cpp, sm90_supports) only picks sm90 where they do.
bool make_params(const FwdArgs& a, DimPair dims, Tile tile, bool bf16, Sm90Params* out, std::string* why);
// The fp8 tiles' (Tile::fp8, fp8_long_keys): e4m3 q / k maps, the V^T workspace `vt` of layout `vl` (written by
// launch_fp8_vt first) as the v map, the descale factors of `a`, a bf16 out map.
bool make_params_fp8(const FwdArgsFp8& a, DimPair dims, Tile tile, const void* vt, const Fp8VtLayout& vl, Sm90Params* out,
                     std::string* why);

// The fp8-KV tile's (Tile::fp8_kv): 16-bit q (bf16 or fp16) and out maps, e4m3 k / v maps of the
// cache (128-column boxes, 128-byte swizzle), and k / v_descale per (batch, kv head) of `a` (the
// planner routes no per-token factors here: a.k_tok = a.v_tok = 0).
bool make_params_fp8_kv(const FwdArgsFp8& a, DimPair dims, bool bf16, Sm90Params* out, std::string* why);
// The keys-on-M decode kernel's (launch_decode_kv): the fp8_kv tile's maps, and the factors per
// (batch, kv head) or per (token, kv head).
bool make_params_decode_kv(const FwdArgsFp8& a, DimPair dims, bool bf16, Sm90Params* out, std::string* why);

// Launches the kernel: grid = (persistent CTAs), which walk P.sched's tiles; a (dims, tile)
// pair without an instance returns cudaErrorInvalidValue.
cudaError_t launch_fwd(const Sm90Params& P, DimPair dims, Tile tile, bool bf16, dim3 grid, cudaStream_t stream);
// The gather instance of (dims, tile) (fwd_gather.h); cudaErrorInvalidValue where there is none
// (has_gather_instance).
cudaError_t launch_fwd_gather(const Sm90Params& P, DimPair dims, Tile tile, bool bf16, dim3 grid, cudaStream_t stream);

// Per-dim (and per-tile) entry points (fwd_dXXX*.cu).
cudaError_t launch_fwd_d64(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d64_short_masked(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d256_long_keys(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d128_long_keys(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d128(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d64_split_kv(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d128_split_kv(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
// (FA4_SM90_BALANCED builds; cudaErrorNotSupported otherwise -- the planner never picks it then)
cudaError_t launch_fwd_d128_balanced(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d256_split_kv(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d256(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d192_128(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
// The gather instances (fwd_gather.h, FA4_SM90_PAGED_GATHER: the producer warpgroup copies a
// paged cache's K / V by cp.async; the same parameters, from make_params, whose K / V maps go
// unused), each compiled beside its TMA twin, so a variant staged against a main build
// (bench/stage_sm90_variant.sh) links them without new object names.
cudaError_t launch_fwd_d64_gather(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d64_split_kv_gather(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d128_gather(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d128_split_kv_gather(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d256_gather(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d256_split_kv_gather(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d64_fp8(const Sm90Params& P, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d64_fp8_long_keys(const Sm90Params& P, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d128_fp8(const Sm90Params& P, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d128_fp8_long_keys(const Sm90Params& P, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d256_fp8(const Sm90Params& P, dim3 grid, cudaStream_t stream);
cudaError_t launch_fwd_d128_fp8_kv(const Sm90Params& P, bool bf16, dim3 grid, cudaStream_t stream);
// (FA4_SM90_DECODE_KEYS_M, decode_kv.h) The keys-on-M decode kernel on an fp8_kv call's parameters:
// its own grid (batch x hkv x splits), two CTAs per SM.
cudaError_t launch_decode_kv(const Sm90Params& P, bool bf16, cudaStream_t stream);
// (FA4_SM90_FP8_KV_F16_COMPUTE) bf16 q against the e4m3 cache, computed in fp16 (fwd_fp8_kv.h).
cudaError_t launch_fwd_d128_fp8_kv_f16(const Sm90Params& P, dim3 grid, cudaStream_t stream);

// The fp8 call's V^T pre-pass (fwd_fp8_vt.cu): writes V^T of every sequence of `a` (e4m3 v) into
// `vt`, laid out as `vl` says (fp8_layout.h), on `stream`, before the attention kernel reads it.
cudaError_t launch_fp8_vt(const FwdArgs& a, void* vt, const Fp8VtLayout& vl, cudaStream_t stream);

}  // namespace fa4::cuda::sm90
