// 2^x for the softmax: on the MUFU unit (ex2.approx) or emulated on the FMA pipes.
//
// Why both: an H100 / H200 SM issues 16 MUFU ex2 per clock against 4096 dense 16-bit tensor
// FLOP, so at D = 64 a 64 x 128 softmax tile (8192 exps, 512 clocks) costs as long as its two
// GEMMs (2 x 64 x 128 x 64 x 2 FLOP, 512 clocks): the exponentials bound the kernel. The FMA
// pipes (128 lanes per clock) take a share of them with a polynomial (FA4's trick, DESIGN §3).
//
// The emulation: x = n + f with n = round(x) (the 1.5 * 2^23 magic-number rounding, two FADDs)
// and f in [-0.5, 0.5]; 2^f by a cubic (coefficients fitted for minimal relative error on
// [-0.5, 0.5]: max 7.5e-5 = 2^-13.7, below the 2^-9 / 2^-11 rounding of the bf16 / fp16 P it
// feeds); 2^n added to the exponent field as an integer. x < -126 (masked keys: -inf) gives 0,
// as ex2.approx does, so fully masked rows keep l = 0.
#pragma once

#include <cstdint>

#include "cuda/ptx/sm80_ptx.cuh"

namespace fa4::cuda {

__device__ __forceinline__ float exp2_fma(float x) {
  constexpr float kMagic = 12582912.f;  // 1.5 * 2^23: x + kMagic rounds x to an integer in the low mantissa bits
  const float xc = fmaxf(x, -127.f);
  const float t = xc + kMagic;
  const float n = t - kMagic;
  const float f = xc - n;  // [-0.5, 0.5]
  float p = fmaf(0.0551716611f, f, 0.242611125f);
  p = fmaf(p, f, 0.693260968f);
  p = fmaf(p, f, 0.999928057f);
  const int32_t bits = __float_as_int(p) + (__float_as_int(t) << 23);  // t's low bits hold n (two's complement)
  return x < -126.f ? 0.f : __int_as_float(bits);
}

// Element i of a run of exponentials: every kEmuEvery-th on the FMA pipes (0: none).
template <int kEmuEvery>
__device__ __forceinline__ float exp2_mixed(float x, int i) {
  if constexpr (kEmuEvery > 0) {
    if (i % kEmuEvery == kEmuEvery - 1) return exp2_fma(x);
  }
  return ptx::exp2_approx(x);
}

}  // namespace fa4::cuda
