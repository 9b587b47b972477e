// Storage-type conversions (src/core/numeric.h): every encoding round-trips, rounding is to
// nearest with ties to even, fp16 overflows to inf, e4m3 saturates to 448, NaN stays NaN.
#include "core/numeric.h"

#include <cmath>
#include <limits>

#include "test_util.h"

namespace fa4test {
namespace {

using namespace fa4::core;

TEST(Numeric, EveryFp16EncodingRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_EQ((h & 0x7c00u), 0x7c00u);
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(Numeric, EveryBf16EncodingRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(f), h) << std::hex << h;
  }
}

TEST(Numeric, EveryE4m3EncodingRoundTrips) {
  for (uint32_t b = 0; b < 256; ++b) {
    const float f = e4m3_to_f32(static_cast<uint8_t>(b));
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << b;
      EXPECT_EQ(f32_to_e4m3(f), 0x7f);
      continue;
    }
    EXPECT_TRUE(std::isfinite(f));
    ASSERT_EQ(f32_to_e4m3(f), b) << b << " = " << f;
  }
  // Every finite byte against the format's definition: (-1)^s (1 + m/8) 2^(e-7), subnormals
  // (e = 0) m/8 2^-6, signed zeros kept.
  for (uint32_t b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    const int e = static_cast<int>((b >> 3) & 0xf), m = static_cast<int>(b & 7);
    const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
    const float f = e4m3_to_f32(static_cast<uint8_t>(b));
    EXPECT_EQ(static_cast<double>(f), b & 0x80 ? -mag : mag) << b;
    EXPECT_EQ(std::signbit(f), (b & 0x80) != 0) << b;
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
}

TEST(Numeric, KnownFp16Values) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // tie between 65504 and 65536 rounds to even = inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);       // tie -> even (0)
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);       // tie 1.5 ulp -> 2
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);         // smallest normal
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.5f, -24)), 0x0400);      // subnormal rounding up into the normals
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
}

TEST(Numeric, KnownBf16Values) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  const uint16_t n = f32_to_bf16(std::nanf(""));
  EXPECT_TRUE(std::isnan(bf16_to_f32(n)));
  // A signalling-pattern NaN whose payload sits in the low bits must stay NaN (not become inf).
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(bits_f32(0x7f800001u)))));
}

TEST(Numeric, KnownE4m3Values) {
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);  // tie between 1 and 1.125 -> even
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);  // tie between 1.125 and 1.25 -> even (1.25)
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(1000.0f), 0x7e);  // saturates
  EXPECT_EQ(f32_to_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -9)), 0x01);  // smallest subnormal
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // tie -> even (0)
  EXPECT_EQ(f32_to_e4m3(std::ldexp(3.0f, -10)), 0x02);  // tie 1.5 ulp -> 2
  EXPECT_EQ(f32_to_e4m3(std::ldexp(15.0f, -10)), 0x08);  // 7.5 * 2^-9 -> 2^-6 (smallest normal)
  EXPECT_EQ(f32_to_e4m3(std::nanf("")), 0x7f);
}

// Random floats: the conversion picks the nearest representable value (checked against both
// neighbours of the result).
template <class To, class From>
void check_nearest(To to, From from, uint16_t max_finite_bits, std::mt19937_64& rng, float range) {
  std::uniform_real_distribution<float> u(-range, range);
  for (int i = 0; i < 20000; ++i) {
    const float x = u(rng) * std::ldexp(1.0f, -static_cast<int>(rng() % 20));
    const auto h = to(x);
    const float y = from(h);
    ASSERT_TRUE(std::isfinite(y)) << x;
    const uint16_t mag = static_cast<uint16_t>(h & 0x7fff);
    const uint16_t sign = static_cast<uint16_t>(h & 0x8000);
    for (int delta : {-1, 1}) {
      const int nb = static_cast<int>(mag) + delta;
      if (nb < 0 || nb > max_finite_bits) continue;
      const float z = from(static_cast<decltype(h)>(sign | nb));
      ASSERT_LE(std::fabs(y - x), std::fabs(z - x)) << "x=" << x << " got " << y << " but " << z << " is nearer";
    }
  }
}

TEST(Numeric, ConversionsRoundToTheNearestValue) {
  std::mt19937_64 rng(derive_seed(90000));
  FA4_SEED_TRACE(derive_seed(90000));
  check_nearest([](float x) { return f32_to_f16(x); }, [](uint16_t h) { return f16_to_f32(h); }, 0x7bff, rng, 60000.0f);
  check_nearest([](float x) { return f32_to_bf16(x); }, [](uint16_t h) { return bf16_to_f32(h); }, 0x7f7f, rng, 1e30f);
  std::uniform_real_distribution<float> u(-440.0f, 440.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = u(rng) * std::ldexp(1.0f, -static_cast<int>(rng() % 14));
    const uint8_t b = f32_to_e4m3(x);
    const float y = e4m3_to_f32(b);
    for (int delta : {-1, 1}) {
      const int nb = (b & 0x7f) + delta;
      if (nb < 0 || nb > 0x7e) continue;
      const float z = e4m3_to_f32(static_cast<uint8_t>((b & 0x80) | nb));
      ASSERT_LE(std::fabs(y - x), std::fabs(z - x)) << "x=" << x;
    }
  }
}

}  // namespace
}  // namespace fa4test
