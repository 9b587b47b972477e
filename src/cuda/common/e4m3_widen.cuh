// e4m3 bytes widened to the 16-bit compute type on the GPU (sm_89+), four at a time: the
// converter warps of the sm90 fp8-KV tile (sm90/fwd_fp8_kv.cuh) turn every byte of an e4m3
// K / V cache into the element its 16-bit ring holds. Exact for all 256 codes (every e4m3 value,
// 2^-9 .. 448, is exact in fp16, bf16 and fp32; +-0 keep their sign; NaN S.1111.111 gives a NaN;
// e4m3 has no infinities) -- tests/cuda/test_sm90_ptx.cu checks all 65,536 byte pairs against
// common/e4m3.h's decoding.
//
// SASS per 4 bytes (sm_90a, nvcc 13.0): fp16 2 F2FP.F16.E4M3.UNPACK_B + 1 SHF (the high pair);
// bf16 the same + 4 HADD2.F32 (fp16 -> fp32, exact) + 2 F2FP.BF16.F32.PACK_AB (exact: the values
// fit bf16's 8 significant bits) = 9. A bit-level bf16 map (magnitude << 4 into the bf16 fields,
// x 2^120 in a bf16 multiply, plus a NaN fix-up: 480 came out for S.1111.111) took 9 + 3.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/ptx/sm90_ptx.cuh"

namespace fa4::cuda {

// The 4 e4m3 bytes of x (byte 0 first) as 4 Elem values: lo = bytes 0, 1 and hi = bytes 2, 3,
// each pair packed with the lower byte's value in the low half (the order of a row in memory).
template <typename Elem>
__device__ __forceinline__ void widen_e4m3x4(uint32_t x, uint32_t& lo, uint32_t& hi);

template <>
__device__ __forceinline__ void widen_e4m3x4<__half>(uint32_t x, uint32_t& lo, uint32_t& hi) {
  lo = ptx::cvt_f16x2_e4m3x2(static_cast<uint16_t>(x));
  hi = ptx::cvt_f16x2_e4m3x2(static_cast<uint16_t>(x >> 16));
}

template <>
__device__ __forceinline__ void widen_e4m3x4<__nv_bfloat16>(uint32_t x, uint32_t& lo, uint32_t& hi) {
  // fp16 (exact) -> fp32 (exact) -> bf16 (exact: 4 significant bits, exponents -9 .. 8).
  auto bf16x2 = [](uint32_t h) {
    __half2 v;
    static_assert(sizeof(v) == 4);
    __builtin_memcpy(&v, &h, 4);
    const float2 f = __half22float2(v);
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
    uint32_t r;
    __builtin_memcpy(&r, &b, 4);
    return r;
  };
  lo = bf16x2(ptx::cvt_f16x2_e4m3x2(static_cast<uint16_t>(x)));
  hi = bf16x2(ptx::cvt_f16x2_e4m3x2(static_cast<uint16_t>(x >> 16)));
}

}  // namespace fa4::cuda
