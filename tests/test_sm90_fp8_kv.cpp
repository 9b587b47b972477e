// The widening map of the sm90 kernel's fp8-KV tile (src/cuda/sm90/fwd_fp8_kv.h ConvertMap, the
// index arithmetic of fwd_fp8_kv.cuh KvConverter::slot) on the CPU, for the kernel's converter
// count (96: producer warps 1-3) and another one whose group step is also 4 mod 8 (224): the
// converter threads' units cover every 16-byte piece of an e4m3 byte slot exactly once, read it
// where the 128-byte-swizzled TMA box put it, and write its 16 values where a 16-bit TMA box of
// the same rows would have put them -- checked by emulating the converters on slot images -- with
// no shared-memory bank conflict in any quarter-warp phase of the loads or the stores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "cuda/common/e4m3.h"
#include "cuda/sm90/fwd_fp8_kv.h"

namespace {

using fa4::cuda::sm90::ConvertMap;
using fa4::cuda::sm90::kConvertThreads;
// A second converter count the map and its lean offsets must hold for (kGroupStep 28 = 4 mod 8).
constexpr int kOtherThreads = 224;
static_assert(kConvertThreads == 96, "producer warps 1-3");

// TMA's 128-byte swizzle of a [rows][128-byte] chunk on a 1024-byte boundary: piece p of row r at
// 128 r + 16 (p ^ (r % 8)).
uint32_t swizzled(int row, int piece) { return static_cast<uint32_t>(row * 128 + ((piece ^ (row % 8)) << 4)); }

template <int kBlockN, int kD, int kThreads>
void check_map() {
  SCOPED_TRACE(::testing::Message() << kBlockN << " x " << kD << ", " << kThreads << " converter threads");
  using M = ConvertMap<kBlockN, kD, kThreads>;
  constexpr uint32_t kByteChunk = kBlockN * 128, kChunk16 = kBlockN * 128;
  // A byte slot as the TMA writes it (row r, column c of the tile: chunk c / 128) and the 16-bit
  // slot the converters fill (bf16 bits of the values; chunk c / 64).
  std::mt19937 rng(7);
  std::vector<uint8_t> tile(static_cast<size_t>(kBlockN) * kD);
  for (auto& b : tile) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> bytes(static_cast<size_t>(kBlockN) * kD);
  for (int r = 0; r < kBlockN; ++r)
    for (int c = 0; c < kD; ++c)
      bytes[(c / 128) * kByteChunk + swizzled(r, (c % 128) / 16) + c % 16] = tile[static_cast<size_t>(r) * kD + c];
  std::vector<uint16_t> out(static_cast<size_t>(kBlockN) * kD, 0xdead);
  std::set<std::pair<int, int>> seen;
  for (int ct = 0; ct < kThreads; ++ct) {
    const uint32_t rl = static_cast<uint32_t>(ct) % 8u, g0 = static_cast<uint32_t>(ct) / 8u;
    for (int i = 0; i < M::kSteps; ++i) {
      const uint32_t g = g0 + static_cast<uint32_t>(i) * M::kGroupStep;
      if (g >= M::kGroups) {
        EXPECT_EQ(i, M::kSteps - 1) << "only the last step is partial";
        continue;
      }
      const int u = static_cast<int>(g * 8 + rl);
      const int r = M::row(u), p = M::piece(u);
      EXPECT_EQ(static_cast<int>(M::row_of(g, rl)), r);  // (the converters' sequence-end test)
      EXPECT_TRUE(seen.insert({r, p}).second) << "unit (" << r << ", " << p << ") twice";
      EXPECT_EQ(M::src(g, rl), (p / 8) * kByteChunk + swizzled(r, p % 8));
      for (int h = 0; h < 2; ++h) {
        const int c0 = 16 * p + 8 * h;  // first column of the half
        EXPECT_EQ(M::dst(g, rl, h), (c0 / 64) * kChunk16 + swizzled(r, (c0 % 64) / 8));
        for (int e = 0; e < 8; ++e) {
          const float v = fa4::cuda::e4m3_to_f32(bytes[M::src(g, rl) + 8 * h + e]);
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          out[(M::dst(g, rl, h) + 2 * e) / 2] = static_cast<uint16_t>(bits >> 16);  // bf16: exact
        }
      }
    }
  }
  EXPECT_EQ(static_cast<int>(seen.size()), M::kUnits);
  // Read back through the 16-bit swizzle: every element is its tile byte's value.
  int bad = 0;
  for (int r = 0; r < kBlockN; ++r)
    for (int c = 0; c < kD; ++c) {
      const uint32_t at = (c / 64) * kChunk16 + swizzled(r, (c % 64) / 8) + 2 * (c % 8);
      const float v = fa4::cuda::e4m3_to_f32(tile[static_cast<size_t>(r) * kD + c]);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (out[at / 2] != static_cast<uint16_t>(bits >> 16) && ++bad <= 5) ADD_FAILURE() << "row " << r << " col " << c;
    }
  EXPECT_EQ(bad, 0);
  // Bank conflicts: the 8 lanes of each quarter warp (one phase of a 16-byte access) hit 8
  // different 16-byte bank groups, on the load and on each store (lanes past the slot idle).
  // (Converter warps are 32 consecutive ct from a multiple of 32.)
  for (int w = 0; w < kThreads / 32; ++w)
    for (int q = 0; q < 4; ++q)
      for (int i = 0; i < M::kSteps; ++i) {
        std::set<uint32_t> ld, st0, st1;
        int lanes = 0;
        for (int l = 0; l < 8; ++l) {
          const int ct = 32 * w + 8 * q + l;
          const uint32_t rl = static_cast<uint32_t>(ct) % 8u, g = static_cast<uint32_t>(ct) / 8u + i * M::kGroupStep;
          if (g >= M::kGroups) continue;
          ++lanes;
          ld.insert(M::src(g, rl) % 128 / 16), st0.insert(M::dst(g, rl, 0) % 128 / 16), st1.insert(M::dst(g, rl, 1) % 128 / 16);
        }
        EXPECT_EQ(static_cast<int>(ld.size()), lanes);
        EXPECT_EQ(static_cast<int>(st0.size()), lanes);
        EXPECT_EQ(static_cast<int>(st1.size()), lanes);
      }
}

// The lean converter's offsets (ConvertMap::lean_*, KvConverter::units_lean):
// a per-thread base plus a step term equal the map's own src / dst / row_of at every step, the
// hi flag is one value per warp (its template parameter), every step before the last is inside
// the slot, and the row groups repeat in even / odd pairs (the batch loop's pointer advance).
template <int kBlockN, int kThreads>
void check_lean() {
  SCOPED_TRACE(::testing::Message() << kBlockN << " x 128, " << kThreads << " converter threads");
  using M = ConvertMap<kBlockN, 128, kThreads>;
  static_assert(M::kLeanMap);
  constexpr int kPairRg = static_cast<int>(M::kGroupStep) / 4;
  for (uint32_t ct = 0; ct < kThreads; ++ct) {
    const uint32_t rl = ct % 8, g0 = ct / 8;
    const bool hi = M::lean_hi(ct);
    EXPECT_EQ(hi, M::lean_hi(ct / 32 * 32)) << "hi differs inside warp " << ct / 32;
    for (int i = 0; i < M::kSteps; ++i) {
      const uint32_t g = g0 + static_cast<uint32_t>(i) * M::kGroupStep;
      if (i < M::kSteps - 1) {
        EXPECT_LT(g, M::kGroups) << "ct " << ct << " step " << i;
      }
      if (g >= M::kGroups) continue;
      const int rg = M::lean_rg(hi, i);
      EXPECT_EQ(rg, (i / 2) * kPairRg + (i % 2 ? M::lean_rg(hi, 1) : 0)) << "ct " << ct << " step " << i;
      EXPECT_EQ(M::src(g, rl), M::lean_src(ct, i % 2) + 1024u * rg) << "ct " << ct << " step " << i;
      for (uint32_t h = 0; h < 2; ++h)
        EXPECT_EQ(static_cast<int64_t>(M::dst(g, rl, h)),
                  static_cast<int64_t>(M::lean_dst(ct, h)) + (i % 2 ? M::lean_odd_chunk(hi) : 0) + 1024 * rg)
            << "ct " << ct << " step " << i << " half " << h;
      EXPECT_EQ(M::row_of(g, rl), M::lean_row(ct) + 8u * rg) << "ct " << ct << " step " << i;
    }
  }
}

TEST(Sm90Fp8Kv, LeanOffsetsAreTheMap) {
  check_lean<128, kConvertThreads>();
  check_lean<128, kOtherThreads>();
  check_lean<64, kConvertThreads>();
  check_lean<64, kOtherThreads>();
}

TEST(Sm90Fp8Kv, ConvertMapD128) {
  check_map<128, 128, kConvertThreads>();
  check_map<128, 128, kOtherThreads>();
}
TEST(Sm90Fp8Kv, ConvertMapOtherShapes) {  // (shapes an instance may take later)
  check_map<64, 128, kConvertThreads>();
  check_map<128, 256, kConvertThreads>();
  check_map<64, 128, kOtherThreads>();
  check_map<128, 256, kOtherThreads>();
}

TEST(Sm90Fp8Kv, PagesThatFitTheBoxes) {
  using fa4::cuda::sm90::fp8_kv_pages_fit;
  for (int64_t p : {128, 256, 1024}) EXPECT_TRUE(fp8_kv_pages_fit(p, 128)) << p;
  for (int64_t p : {8, 16, 32, 64}) EXPECT_EQ(fp8_kv_pages_fit(p, 128), FA4_SM90_PAGED_SUB != 0) << p;
  for (int64_t p : {1, 3, 4, 24, 48, 96, 192}) EXPECT_FALSE(fp8_kv_pages_fit(p, 128)) << p;
}

// ---- FA4_SM90_FP8_KV_F16_COMPUTE: the per-row power-of-two shift of bf16 q before fp16 ----
// (fwd_fp8_kv.h fp8_kv_q_shift; the device side is fwd_consumer.cuh Consumer::convert_q: the row's
// largest (bits & 0x7fff), x 2^s in fp32, rounded to fp16, the scores x 2^-s.)

// A bf16 bit pattern's value (exact in double).
double bf16_value(uint16_t b) {
  uint32_t f = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &f, 4);
  return x;
}
// v rounded to fp16, round to nearest even (bit-level reference: fp16 keeps 11 significant bits
// down to 2^-14, then a fixed step of 2^-24; +-inf from 65520 on).
double fp16_rn(double v) {
  const double a = std::fabs(v);
  if (a >= 65520.0) return std::copysign(INFINITY, v);
  if (a == 0.0) return v;
  int e = std::ilogb(a);
  if (e < -14) e = -14;
  const double ulp = std::ldexp(1.0, e - 10);
  return std::nearbyint(v / ulp) * ulp;  // default rounding mode: to nearest, ties to even
}
// The device's row shift: the max of (bits & 0x7fff) over the row.
int row_shift(const std::vector<uint16_t>& row) {
  uint32_t m = 0;
  for (uint16_t b : row) m = std::max<uint32_t>(m, b & 0x7fffu);
  return fa4::cuda::sm90::fp8_kv_q_shift(m);
}
uint16_t bf16_bits(float x) {  // (exact for the values below)
  uint32_t f;
  std::memcpy(&f, &x, 4);
  return static_cast<uint16_t>(f >> 16);
}

TEST(Sm90Fp8Kv, F16QShiftRows) {
  using fa4::cuda::sm90::fp8_kv_q_shift;
  using fa4::cuda::sm90::kFp8KvQShiftMax;
  // Normal values: max |q| = 3.5 (exponent 1) -> 2^13 x 3.5 in [2^14, 2^15).
  EXPECT_EQ(row_shift({bf16_bits(1.f), bf16_bits(-3.5f), bf16_bits(0.25f), 0}), 13);
  EXPECT_EQ(row_shift({bf16_bits(-1.f)}), 14);
  EXPECT_EQ(row_shift({bf16_bits(32768.f), bf16_bits(-1e-3f)}), -1);
  // Tiny values: 2^-100 -> 2^114; the smallest normal 2^-126 and subnormals clamp to 126.
  EXPECT_EQ(row_shift({bf16_bits(std::ldexp(1.f, -100)), 0}), 114);
  EXPECT_EQ(row_shift({bf16_bits(std::ldexp(1.f, -126))}), kFp8KvQShiftMax);
  EXPECT_EQ(row_shift({0x0001, 0x8040}), kFp8KvQShiftMax);
  // Zeros (+0 and -0): no shift.
  EXPECT_EQ(row_shift({0, 0x8000, 0}), 0);
  // Inf / NaN anywhere in the row: no shift (they propagate as in the bf16 path).
  EXPECT_EQ(row_shift({bf16_bits(1.f), 0x7f80}), 0);
  EXPECT_EQ(row_shift({bf16_bits(1e-30f), 0xff80}), 0);
  EXPECT_EQ(row_shift({0x7fc0, bf16_bits(2.f)}), 0);
  EXPECT_EQ(row_shift({0xffc1}), 0);
  // The top exponent (bf16 max 0x7f7f = 3.39e38, 2^127 x 1.99): 2^-113.
  EXPECT_EQ(row_shift({0x7f7f, bf16_bits(1.f)}), -113);
  EXPECT_EQ(row_shift({0xff00}), -113);
  // The shift depends on the exponent field alone, and both 2^s and 2^-s are normal fp32.
  for (uint32_t e = 0; e < 255; ++e) {
    const int s0 = fp8_kv_q_shift(e << 7 | (e == 0 ? 1u : 0u));
    EXPECT_GE(s0, -113);
    EXPECT_LE(s0, 126);
    for (uint32_t mant = e == 0 ? 1 : 0; mant < 128; ++mant) ASSERT_EQ(fp8_kv_q_shift(e << 7 | mant), s0) << e;
  }
  EXPECT_EQ(fa4::cuda::sm90::fp8_kv_pow2_bits(0), 0x3f800000u);
  EXPECT_EQ(fa4::cuda::sm90::fp8_kv_pow2_bits(-126), 0x00800000u);
  EXPECT_EQ(fa4::cuda::sm90::fp8_kv_pow2_bits(126), 0x7e800000u);
}

// Exhaustive over rows: for every finite nonzero row max exponent E and every bf16 value y a row of
// that max can hold (|y| <= the largest value of exponent E), y x 2^s rounded to fp16 and scaled
// back by 2^-s is y exactly whenever |y 2^s| >= 2^-14 (fp16's normals) -- in particular the row max
// itself, every bf16 pattern x with s chosen for a row whose max is x -- never overflows, and
// otherwise is off by at most 2^-25 (half fp16's subnormal step) in scaled units, with
// |y| < 2^-28 of the row max (or, in the clamped rows of E < 15, < 2^-140 absolutely).
TEST(Sm90Fp8Kv, F16QShiftExactExhaustive) {
  using fa4::cuda::sm90::fp8_kv_q_shift;
  int64_t checked = 0, inexact = 0;
  for (uint32_t e = 0; e < 255; ++e) {
    const uint32_t top = e << 7 | 0x7fu;  // the largest magnitude of exponent field e
    const int s = fp8_kv_q_shift(e == 0 ? 1u : e << 7);
    const double up = std::ldexp(1.0, s), down = std::ldexp(1.0, -s);
    const double row_min = e == 0 ? bf16_value(1) : bf16_value(static_cast<uint16_t>(e << 7));  // smallest max of E
    // The row max's scaled magnitude: [2^14, 2^15) unless clamped (E < 15: then below 2^14).
    const bool clamped = e < 15;
    EXPECT_EQ(clamped, s == fa4::cuda::sm90::kFp8KvQShiftMax && e != 15) << e;
    if (!clamped) {
      EXPECT_GE(row_min * up, 16384.0) << e;
      EXPECT_LT(bf16_value(static_cast<uint16_t>(top)) * up, 32768.0) << e;
    } else {
      EXPECT_LT(bf16_value(static_cast<uint16_t>(top)) * up, 16384.0) << e;
    }
    for (uint32_t mag = 0; mag <= top; ++mag) {
      for (uint32_t sign : {0u, 0x8000u}) {
        const uint16_t y = static_cast<uint16_t>(mag | sign);
        const double v = bf16_value(y) * up;  // exact: a power of two (fp32 on the device)
        const double r = fp16_rn(v);
        ++checked;
        ASSERT_TRUE(std::isfinite(r)) << "E " << e << " y " << y;
        if (std::fabs(v) >= std::ldexp(1.0, -14)) {
          ASSERT_EQ(r * down, bf16_value(y)) << "E " << e << " y 0x" << std::hex << y;
        } else {
          inexact += r != v;
          ASSERT_LE(std::fabs(r - v), std::ldexp(1.0, -25)) << "E " << e << " y " << y;
          if (!clamped)
            ASSERT_LT(std::fabs(bf16_value(y)), std::ldexp(row_min, -28)) << "E " << e << " y " << y;
          else
            ASSERT_LT(std::fabs(bf16_value(y)), std::ldexp(1.0, -140)) << "E " << e << " y " << y;
        }
      }
    }
  }
  EXPECT_GT(inexact, 0);  // (the bound above is not vacuous: small values do lose bits)
  std::printf("F16QShiftExactExhaustive: %lld (row exponent, value) pairs, %lld below fp16's normals inexact\n",
              static_cast<long long>(checked), static_cast<long long>(inexact));
}

}  // namespace
