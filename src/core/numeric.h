// Scalar conversions between the storage types and fp32, on the host.
//
// Bit-exact IEEE/OCP semantics: round-to-nearest-even on the way down, NaN stays NaN, fp16
// overflows to +-inf, e4m3 (OCP "fn" variant: no infinities) saturates to +-448 and maps NaN
// to 0x7f. Used by the reference, the cpu backend's scalar paths, the tests and the CLI.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "fa4/tensor.h"

namespace fa4::core {

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero / subnormal: man * 2^-24
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));  // inf / NaN
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65536 -> inf
  if (a < 0x38800000u) {                        // below 2^-14: subnormal (or zero)
    // value / 2^-24 rounded to nearest even; float has enough precision for the exact rint.
    const float v = bits_f32(a) * 16777216.0f;  // * 2^24, exact
    return sign | static_cast<uint16_t>(std::nearbyint(v));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // round mantissa 23 -> 10 bits, nearest even
  return sign | static_cast<uint16_t>(((r >> 13) - (112u << 10)) & 0x7fffu);
}

// e4m3 (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no inf, NaN = S.1111.111) by its
// bits: a normal's exponent rebiased to fp32's, a subnormal man * 2^-9 (exact). (The reference
// backend decodes every K / V element once per visible score: std::ldexp made fp8 calls 10x
// slower than 16-bit ones there.)
inline float e4m3_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t man = b & 0x7u;
  if (exp == 15 && man == 7) return std::nanf("");
  if (exp == 0) return bits_f32(sign | f32_bits(static_cast<float>(man) * 0x1p-9f));  // man/8 * 2^-6
  return bits_f32(sign | ((exp + 120u) << 23) | (man << 20));  // (1 + man/8) * 2^(exp - 7)
}

inline uint8_t f32_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;  // saturate (satfinite)
  // Find the nearest representable value by exponent bucket: spacing 2^(e-3), subnormal 2^-9.
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)  => a in [2^(e-1), 2^e)
  int unbiased = e - 1;
  if (unbiased < -6) unbiased = -6;  // subnormal range shares the 2^-9 spacing
  const float step = std::ldexp(1.0f, unbiased - 3);
  const float q = std::nearbyint(a / step) * step;  // exact in float; nearbyint = ties-to-even
  // Re-encode q (which may have rounded up into the next binade).
  if (q == 0.0f) return sign;
  int qe;
  const float qm = std::frexp(q, &qe);  // q = qm * 2^qe
  int biased = qe - 1 + 7;
  if (biased <= 0) return sign | static_cast<uint8_t>(q / std::ldexp(1.0f, -9));  // subnormal
  const uint32_t man = static_cast<uint32_t>((qm * 2.0f - 1.0f) * 8.0f);
  return sign | static_cast<uint8_t>((biased << 3) | man);
}

// The one quantization of an fp8 KV cache (append_kv_host, for reference and cpu alike; the tests): the
// e4m3 byte of x / scale, both fp32, the quotient rounded once to fp32 and then to e4m3
// (saturating to +-448, NaN kept; scale 0 or inf gives what the IEEE quotient gives).
inline uint8_t quantize_e4m3(float x, float scale) { return f32_to_e4m3(x / scale); }

// One unit in the last place of `t` (bfloat16 / float16 / float32) at magnitude |x|: the spacing
// of its binade, bottoming out at the subnormal spacing; 0 for other types. The rounding
// allowance of results compared in their output dtype (the tests, the CLI's --check).
inline double ulp_of(DType t, double x) {
  int mant = 0, min_exp = 0;
  switch (t) {
    case DType::bfloat16: mant = 7, min_exp = -126; break;
    case DType::float16: mant = 10, min_exp = -14; break;
    case DType::float32: mant = 23, min_exp = -126; break;
    default: return 0.0;
  }
  const double ax = std::fabs(x);
  int e = ax > 0.0 ? std::ilogb(ax) : min_exp;
  if (e < min_exp) e = min_exp;
  return std::ldexp(1.0, e - mant);
}

}  // namespace fa4::core
