// The keys-on-M decode tile's lane fragments (src/cuda/sm90/decode_frag.h), emulated on the CPU
// instruction by instruction: ldmatrix.x4 (plain for K, .trans for V) from 128-byte-swizzled e4m3
// slots, prmt, cvt.rn.f16x2.e4m3x2, movmatrix.trans and mma.sync m16n8k16 with the PTX ISA's
// fragment layouts (restated in decode_frag.h). The kernel's register assembly -- the same
// functions the device code calls -- must give S^T = K Q^T and O^T = V^T P^T equal to direct
// products over a 128-key slot at D 128 -- O^T also where the sequence ends inside the slot and
// the V rows past it are NaN codes (v_keep_mask) --, and every 8-lane ldmatrix phase must be free
// of bank conflicts.
#include "cuda/sm90/decode_frag.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "cuda/common/e4m3.h"

namespace {

using namespace fa4::cuda::sm90::decode;
constexpr int kKeys = 128, kDims = 128, kRows = 8;
using Regs = std::array<std::array<uint32_t, 4>, 32>;

uint16_t f16_bits(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
double f16_value(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<double>(h);
}
// cvt.rn.f16x2.e4m3x2: the low byte to the low half.
uint32_t cvt(uint16_t x) {
  return f16_bits(fa4::cuda::e4m3_to_f32(x & 0xffu)) | static_cast<uint32_t>(f16_bits(fa4::cuda::e4m3_to_f32(x >> 8))) << 16;
}
// prmt.b32 d, x, 0, s (__byte_perm(x, 0, s)): byte i of d is byte (s >> 4i) & 7 of {x, 0}.
uint32_t perm(uint32_t x, uint32_t s) {
  uint32_t d = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t sel = (s >> (4 * i)) & 7u;
    const uint32_t byte = sel < 4 ? (x >> (8 * sel)) & 0xffu : 0u;
    d |= byte << (8 * i);
  }
  return d;
}
uint32_t pack(float lo, float hi) { return f16_bits(lo) | static_cast<uint32_t>(f16_bits(hi)) << 16; }

// The slot as TMA writes it: key j's byte d at row j, 16-byte piece (d / 16) ^ (j % 8).
std::vector<uint8_t> swizzled(const std::vector<uint8_t>& rows) {
  std::vector<uint8_t> s(kKeys * kSlotRowBytes);
  for (int j = 0; j < kKeys; ++j)
    for (int d = 0; d < kDims; ++d) s[j * kSlotRowBytes + (((d >> 4) ^ (j & 7)) << 4) + (d & 15)] = rows[j * kDims + d];
  return s;
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (lane 8m + r: row r of matrix m).
Regs ldsm_x4(const std::vector<uint8_t>& smem, const std::array<uint32_t, 32>& addr, bool trans) {
  Regs reg{};
  auto elem = [&](int m, int row, int col) {  // 16-bit element col of row `row` of matrix m
    const uint32_t a = addr[8 * m + row] + 2 * col;
    return static_cast<uint32_t>(smem[a]) | static_cast<uint32_t>(smem[a + 1]) << 8;
  };
  for (int l = 0; l < 32; ++l)
    for (int m = 0; m < 4; ++m) {
      const int g = l / 4, c = l % 4;
      reg[l][m] = trans ? elem(m, 2 * c, g) | elem(m, 2 * c + 1, g) << 16 : elem(m, g, 2 * c) | elem(m, g, 2 * c + 1) << 16;
    }
  return reg;
}

// movmatrix.sync.aligned.m8n8.trans.b16 over the warp.
std::array<uint32_t, 32> movmatrix_trans(const std::array<uint32_t, 32>& x) {
  uint16_t mat[8][8];
  for (int l = 0; l < 32; ++l) {
    mat[l / 4][2 * (l % 4)] = static_cast<uint16_t>(x[l]);
    mat[l / 4][2 * (l % 4) + 1] = static_cast<uint16_t>(x[l] >> 16);
  }
  std::array<uint32_t, 32> d{};
  for (int l = 0; l < 32; ++l)
    d[l] = mat[2 * (l % 4)][l / 4] | static_cast<uint32_t>(mat[2 * (l % 4) + 1][l / 4]) << 16;
  return d;
}

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 over the warp, accumulated in double.
void mma(std::array<std::array<double, 4>, 32>& acc, const std::array<std::array<uint32_t, 4>, 32>& a,
         const std::array<std::array<uint32_t, 2>, 32>& b) {
  double A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, c = l % 4;
    for (int h = 0; h < 2; ++h) {
      A[g][2 * c + h] = f16_value(static_cast<uint16_t>(a[l][0] >> (16 * h)));
      A[g + 8][2 * c + h] = f16_value(static_cast<uint16_t>(a[l][1] >> (16 * h)));
      A[g][2 * c + 8 + h] = f16_value(static_cast<uint16_t>(a[l][2] >> (16 * h)));
      A[g + 8][2 * c + 8 + h] = f16_value(static_cast<uint16_t>(a[l][3] >> (16 * h)));
      B[2 * c + h][g] = f16_value(static_cast<uint16_t>(b[l][0] >> (16 * h)));
      B[2 * c + 8 + h][g] = f16_value(static_cast<uint16_t>(b[l][1] >> (16 * h)));
    }
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, c = l % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i >> 1), col = 2 * c + (i & 1);
      for (int k = 0; k < 16; ++k) acc[l][i] += A[row][k] * B[k][col];
    }
  }
}

std::vector<uint8_t> random_e4m3(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) {
    do b = static_cast<uint8_t>(rng()); while ((b & 0x7f) == 0x7f);  // no NaN codes
  }
  return v;
}

std::array<uint32_t, 32> lane_addresses(int k0, int p0) {
  std::array<uint32_t, 32> addr{};
  for (int l = 0; l < 32; ++l) addr[l] = ldsm_row_offset(l, k0, p0);
  return addr;
}

TEST(Sm90DecodeFrag, ReductionAndRowPermutationsArePermutations) {
  std::set<int> qk, pv;
  for (int i = 0; i < 16; ++i) qk.insert(qk_dim(i)), pv.insert(pv_dim(i));
  EXPECT_EQ(qk.size(), 16u);
  EXPECT_EQ(pv.size(), 16u);
  EXPECT_EQ(*qk.rbegin(), 15);
  EXPECT_EQ(*pv.rbegin(), 15);
  for (int c = 0; c < 4; ++c)  // b0 / b1: four consecutive dims from q_b_dim
    for (int j = 0; j < 4; ++j) EXPECT_EQ(qk_dim(j < 2 ? 2 * c + j : 2 * c + 8 + j - 2), q_b_dim(c, 0) + j);
}

TEST(Sm90DecodeFrag, LdmatrixPhasesAreConflictFree) {
  for (int k0 = 0; k0 < kKeys; k0 += 16)
    for (int p0 = 0; p0 < kDims / 16; p0 += 2) {
      const auto addr = lane_addresses(k0, p0);
      for (int m = 0; m < 4; ++m) {
        std::set<uint32_t> banks4;  // 16-byte bank groups of one 8-lane phase
        for (int r = 0; r < 8; ++r) {
          EXPECT_EQ(addr[8 * m + r] % 16, 0u);
          banks4.insert((addr[8 * m + r] / 16) % 8);
        }
        EXPECT_EQ(banks4.size(), 8u) << "k0 " << k0 << " p0 " << p0 << " matrix " << m;
      }
    }
}

TEST(Sm90DecodeFrag, ScoresTransposedMatchKTimesQ) {
  std::mt19937 rng(1234);
  const auto k_rows = random_e4m3(rng, kKeys * kDims);
  const auto slot = swizzled(k_rows);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<uint16_t> q(kRows * kDims);  // fp16 query rows
  for (auto& x : q) x = f16_bits(nd(rng));
  for (int k0 = 0; k0 < kKeys; k0 += 16) {
    std::array<std::array<double, 4>, 32> acc{};
    for (int p0 = 0; p0 < kDims / 16; p0 += 2) {
      const Regs r = ldsm_x4(slot, lane_addresses(k0, p0), /*trans=*/false);
      std::array<std::array<std::array<uint32_t, 4>, 32>, 2> a{};
      for (int l = 0; l < 32; ++l) {
        uint32_t rl[4] = {r[l][0], r[l][1], r[l][2], r[l][3]}, al[2][4];
        k_a_regs(rl, al, cvt);
        for (int s = 0; s < 2; ++s)
          for (int i = 0; i < 4; ++i) a[s][l][i] = al[s][i];
      }
      for (int s = 0; s < 2; ++s) {
        std::array<std::array<uint32_t, 2>, 32> b{};
        for (int l = 0; l < 32; ++l) {
          const int g = l / 4, c = l % 4, d = q_b_dim(c, p0 + s);
          b[l][0] = q[g * kDims + d] | static_cast<uint32_t>(q[g * kDims + d + 1]) << 16;
          b[l][1] = q[g * kDims + d + 2] | static_cast<uint32_t>(q[g * kDims + d + 3]) << 16;
        }
        mma(acc, a[s], b);
      }
    }
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + l / 4 + 8 * (i >> 1), row = 2 * (l % 4) + (i & 1);
        double want = 0;
        for (int d = 0; d < kDims; ++d) want += fa4::cuda::e4m3_to_f32(k_rows[key * kDims + d]) * f16_value(q[row * kDims + d]);
        ASSERT_NEAR(acc[l][i], want, 1e-9 * (1 + std::fabs(want))) << "key " << key << " row " << row;
      }
  }
}

// O^T over one slot whose sequence ends at key sk (kKeys: a whole slot): the V rows from sk on
// are NaN codes and P is 0 there, as in a sequence's last key tile; v_keep_mask must keep them out.
void check_output(int sk) {
  SCOPED_TRACE(sk);
  std::mt19937 rng(99 + sk);
  auto v_rows = random_e4m3(rng, kKeys * kDims);
  for (int j = sk; j < kKeys; ++j)
    for (int d = 0; d < kDims; ++d) v_rows[j * kDims + d] = (d & 1) ? 0x7f : 0xff;
  const auto slot = swizzled(v_rows);
  std::uniform_real_distribution<float> ud(0.f, 1.f);
  std::vector<float> p(kKeys * kRows);  // P[key][row], fp16 values
  for (int j = 0; j < kKeys; ++j)
    for (int n = 0; n < kRows; ++n) p[j * kRows + n] = j < sk ? static_cast<float>(static_cast<_Float16>(ud(rng))) : 0.f;
  // O^T over the slot's 8 dim blocks of 16, accumulated over its 16-key M tiles
  std::vector<std::array<std::array<double, 4>, 32>> acc(kDims / 16);
  for (int k0 = 0; k0 < kKeys; k0 += 16) {
    std::array<std::array<uint32_t, 2>, 32> b{};
    {
      std::array<uint32_t, 32> x0{}, x1{};
      for (int l = 0; l < 32; ++l) {  // the S^T accumulator layout: (key g / g + 8; rows 2c, 2c+1)
        const int g = l / 4, c = l % 4;
        x0[l] = pack(p[(k0 + g) * kRows + 2 * c], p[(k0 + g) * kRows + 2 * c + 1]);
        x1[l] = pack(p[(k0 + g + 8) * kRows + 2 * c], p[(k0 + g + 8) * kRows + 2 * c + 1]);
      }
      // p_b_regs per lane, with movmatrix (a warp-wide instruction) applied to the packed registers
      const auto t0 = movmatrix_trans(x0), t1 = movmatrix_trans(x1);
      for (int l = 0; l < 32; ++l) {
        const int g = l / 4, c = l % 4;
        const float pl[4] = {p[(k0 + g) * kRows + 2 * c], p[(k0 + g) * kRows + 2 * c + 1], p[(k0 + g + 8) * kRows + 2 * c],
                             p[(k0 + g + 8) * kRows + 2 * c + 1]};
        uint32_t bl[2];
        int call = 0;
        p_b_regs(pl, bl, pack, [&](uint32_t packed) {
          EXPECT_EQ(packed, call == 0 ? x0[l] : x1[l]);
          return call++ == 0 ? t0[l] : t1[l];
        });
        b[l][0] = bl[0], b[l][1] = bl[1];
      }
    }
    for (int p0 = 0; p0 < kDims / 16; p0 += 2) {
      const Regs r = ldsm_x4(slot, lane_addresses(k0, p0), /*trans=*/true);
      std::array<std::array<std::array<uint32_t, 4>, 32>, 2> a{};
      for (int l = 0; l < 32; ++l) {
        uint32_t rl[4] = {r[l][0], r[l][1], r[l][2], r[l][3]}, al[2][4];
        if (k0 + 16 > sk)
          for (int q = 0; q < 4; ++q) rl[q] &= v_keep_mask(l % 4, q, k0, sk);
        v_a_regs(rl, al, cvt, perm);
        for (int t = 0; t < 2; ++t)
          for (int i = 0; i < 4; ++i) a[t][l][i] = al[t][i];
      }
      for (int t = 0; t < 2; ++t) mma(acc[p0 + t], a[t], b);
    }
  }
  for (int blk = 0; blk < kDims / 16; ++blk)
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) {
        const int dim = 16 * blk + pv_dim(l / 4 + 8 * (i >> 1)), row = 2 * (l % 4) + (i & 1);
        double want = 0;
        for (int key = 0; key < sk; ++key)
          want += static_cast<double>(p[key * kRows + row]) * fa4::cuda::e4m3_to_f32(v_rows[key * kDims + dim]);
        ASSERT_NEAR(acc[blk][l][i], want, 1e-9 * (1 + std::fabs(want))) << "dim " << dim << " row " << row;
      }
}

TEST(Sm90DecodeFrag, OutputTransposedMatchesPTimesV) {
  for (const int sk : {kKeys, 1, 16, 75, 113, 127}) check_output(sk);
}

}  // namespace
