// The cuda backend's e4m3 conversions (src/cuda/common/e4m3.h), on the host: the same functions
// the sm80 kernel (widening K / V / Q bytes) and the fp8 KV append (quantizing new rows) run on
// the device, checked against core/numeric.h, which the reference and cpu backends use.
#include "cuda/common/e4m3.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "core/numeric.h"
#include "test_util.h"

namespace {

namespace core = fa4::core;
using fa4::cuda::e4m3_to_f32;
using fa4::cuda::f32_to_e4m3_sat;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Every byte: the value core decodes, bit for bit (signed zeros included); NaN for 0x7f / 0xff;
// and exact in bf16 and fp16, the kernels' compute types.
TEST(E4m3, EveryByteWidensExactly) {
  int nans = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const float got = e4m3_to_f32(b | 0x1200u);  // bits above the byte are ignored
    const float want = core::e4m3_to_f32(static_cast<uint8_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
      ++nans;
      continue;
    }
    ASSERT_EQ(bits(got), bits(want)) << "byte " << b;
    EXPECT_EQ(core::bf16_to_f32(core::f32_to_bf16(got)), got) << b;
    EXPECT_EQ(core::f16_to_f32(core::f32_to_f16(got)), got) << b;
    EXPECT_EQ(std::signbit(got), (b & 0x80u) != 0) << b;
  }
  EXPECT_EQ(nans, 2);
}

void expect_same_code(float x) {
  const uint8_t want = core::f32_to_e4m3(x), got = f32_to_e4m3_sat(x);
  ASSERT_EQ(got, want) << "x = " << x << " (bits 0x" << std::hex << bits(x) << ")";
}

// Each code's value, its neighbours one fp32 ulp away, and the midpoints to the next code (ties
// to even) with their neighbours: every rounding boundary, both signs.
TEST(E4m3, QuantizesEveryBoundaryAsCore) {
  for (uint32_t b = 0; b < 0x7f; ++b) {
    const float v = core::e4m3_to_f32(static_cast<uint8_t>(b));
    const float next = b + 1 < 0x7f ? core::e4m3_to_f32(static_cast<uint8_t>(b + 1)) : 512.0f;
    const float mid = 0.5f * (v + next);  // exact in fp32
    for (float x : {v, mid, (v + mid) * 0.5f})
      for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, 1e9f)}) {
        expect_same_code(y);
        expect_same_code(-y);
      }
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f, -0.0f, 448.0f, 449.0f, 463.99f, 464.0f, 1e30f, inf, -inf, 0x1p-10f, 0x1p-11f, 0x1.8p-10f,
                  0x1p-126f, 0x1p-149f, std::numeric_limits<float>::max()})
    expect_same_code(x);
  EXPECT_EQ(f32_to_e4m3_sat(std::nanf("")), 0x7f);
  EXPECT_EQ(f32_to_e4m3_sat(-std::nanf("")), 0x7f);
  EXPECT_EQ(f32_to_e4m3_sat(inf), 0x7e);
  EXPECT_EQ(f32_to_e4m3_sat(-inf), 0xfe);
}

// A sweep of fp32 bit patterns across the whole range (every exponent, random fractions) and
// every bf16 / fp16 value (what an append quantizes when the factor is 1).
TEST(E4m3, QuantizesAsCoreAcrossTheRange) {
  const uint64_t seed = fa4test::derive_seed(91);
  FA4_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (uint32_t e = 0; e < 256; ++e)
    for (int k = 0; k < 4000; ++k) {
      const uint32_t u = (e << 23) | static_cast<uint32_t>(rng() & 0x7fffffu) | (k & 1 ? 0x80000000u : 0u);
      expect_same_code(from_bits(u));
    }
  for (uint32_t h = 0; h < 65536; ++h) {
    expect_same_code(core::bf16_to_f32(static_cast<uint16_t>(h)));
    expect_same_code(core::f16_to_f32(static_cast<uint16_t>(h)));
  }
}

}  // namespace
