// e4m3 (OCP "fn": no infinities, NaN = S.1111.111) conversions of the cuda backend's fp8 paths,
// in integer and normal-fp32 arithmetic only, so they are exact under --use_fast_math (which
// flushes fp32 subnormals) and give the same bits on the host: tests/test_e4m3.cpp checks them
// there against core/numeric.h (every byte, and a sweep of fp32 values), since this machine's
// CI has no GPU.
//   e4m3_to_f32      every e4m3 value is exact in fp32, bf16 and fp16 (3 mantissa bits, 2^-9 ..
//                    448: inside fp16's normal range too), so the kernels widen a byte to fp32
//                    here and round it to the 16-bit compute type without loss.
//   f32_to_e4m3_sat  round to nearest even, saturating to +-448 (infinities too), NaN -> 0x7f:
//                    core::f32_to_e4m3, the quantization of an fp8 KV cache's appended rows.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FA4_E4M3_FN __host__ __device__ __forceinline__
#else
#define FA4_E4M3_FN inline
#endif

namespace fa4::cuda {

FA4_E4M3_FN float e4m3_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
FA4_E4M3_FN uint32_t e4m3_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

// The value of e4m3 byte b (bits 0..7 of b; higher bits ignored).
FA4_E4M3_FN float e4m3_to_f32(uint32_t b) {
  const uint32_t mag = b & 0x7fu;
  // Exponent field E, mantissa m: fp32 bits with exponent E + 120 and m on top of the fraction
  // are 2^(E-7) (1 + m/8), the value for E >= 1. For E = 0 the value is m/8 2^-6 =
  // 2 (2^-7 (1 + m/8) - 2^-7): both steps exact, every intermediate a normal fp32 (>= 2^-9),
  // so a flushing multiply-add cannot lose a subnormal.
  float f = e4m3_bits_f32((mag << 20) + 0x3C000000u);
  if (mag < 8u) f = (f - 0.0078125f) * 2.0f;
  uint32_t u = e4m3_f32_bits(f);
  if (mag == 0x7fu) u = 0x7fc00000u;  // NaN
  return e4m3_bits_f32(u | ((b & 0x80u) << 24));
}

// x rounded to the nearest e4m3 (ties to even), saturating to +-448; NaN -> 0x7f (any sign).
FA4_E4M3_FN uint8_t f32_to_e4m3_sat(float x) {
  const uint32_t u = e4m3_f32_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;                                 // NaN
  if (a >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448, inf: 448
  const uint32_t e = a >> 23;                                       // biased fp32 exponent
  if (e < 117u) return static_cast<uint8_t>(sign);  // below 2^-10: rounds to 0 (2^-10 is a tie -> 0)
  if (e < 121u) {
    // [2^-10, 2^-6): the subnormal codes, in units of 2^-9. value / 2^-9 = m 2^(e - 141) for the
    // 24-bit significand m; a carry to 8 is 2^-6, the first normal code (0x08): the same bits.
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 141u - e;  // 21 .. 24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    q += (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
    return static_cast<uint8_t>(sign | q);
  }
  // [2^-6, 448): exponent field e - 120 (1 .. 15), the top 3 fraction bits, round on the other
  // 20; a mantissa carry moves into the exponent field. Below 448 the largest result is 0x7e.
  uint32_t code = ((e - 120u) << 3) | ((a >> 20) & 7u);
  const uint32_t rem = a & 0xfffffu;
  code += (rem > 0x80000u || (rem == 0x80000u && (code & 1u))) ? 1u : 0u;
  return static_cast<uint8_t>(sign | code);
}

}  // namespace fa4::cuda
