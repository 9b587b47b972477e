// The sm90 fp8 tile's in-kernel V^T transpose (src/cuda/sm90/fp8_vt_transpose.h), emulated on the
// CPU instruction by instruction: ldmatrix.x4.trans from a 128-byte-swizzled V byte slot, the
// per-lane prmt selectors, stmatrix.x4 into the V^T slot. For every unit of a slot -- shared out
// among the converter warps as the kernel does -- the V^T slot must come out byte for byte as the
// pre-pass's workspace lands there through TMA (fp8_layout.h: column kappa of a 32-key block holds
// key fp8_pv_key(kappa), 128-byte swizzle), with zeros for keys at or past the sequence's end;
// every V^T byte written once; every 8-lane phase of both instructions free of bank conflicts.
// The fragment semantics are the PTX ISA's (ldmatrix / stmatrix .m8n8 .b16: lane 8m + r supplies
// row r of matrix m; register m of lane l is row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 of
// matrix m, transposed by .trans).
#include "cuda/sm90/fp8_vt_transpose.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "cuda/sm90/fwd_fp8_kv.h"

namespace {

using namespace fa4::cuda::sm90;
constexpr int kVtSlotBytes = 128 * 128;  // the V^T slot at Dv 128 (Dv 64: the first half)

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: addr[l] is row l % 8 of matrix l / 8 (16 bytes:
// 8 16-bit elements); lane l's register m gets elements (row 2 (l % 4), column l / 4) and (row
// 2 (l % 4) + 1, column l / 4) of matrix m, the first in the low half.
void ldsm_x4_trans(const std::vector<uint8_t>& smem, const std::array<uint32_t, 32>& addr,
                   std::array<std::array<uint32_t, 4>, 32>& reg) {
  for (int l = 0; l < 32; ++l)
    for (int m = 0; m < 4; ++m) {
      const int col = l / 4;
      uint32_t v = 0;
      for (int half = 0; half < 2; ++half) {
        const int row = 2 * (l % 4) + half;
        const uint32_t a = addr[8 * m + row] + 2 * col;
        v |= (static_cast<uint32_t>(smem[a]) | static_cast<uint32_t>(smem[a + 1]) << 8) << (16 * half);
      }
      reg[l][m] = v;
    }
}

// stmatrix.sync.aligned.m8n8.x4.shared.b16: row r of matrix m (at addr[8m + r]) takes register m
// of lanes 4r .. 4r + 3, lane 4r + t's word at bytes 4t .. 4t + 3.
void stsm_x4(std::vector<uint8_t>& smem, std::vector<int>& writes, const std::array<uint32_t, 32>& addr,
             const std::array<std::array<uint32_t, 4>, 32>& reg) {
  for (int m = 0; m < 4; ++m)
    for (int r = 0; r < 8; ++r)
      for (int t = 0; t < 4; ++t)
        for (int b = 0; b < 4; ++b) {
          const uint32_t a = addr[8 * m + r] + 4 * t + b;
          smem[a] = static_cast<uint8_t>(reg[4 * r + t][m] >> (8 * b));
          ++writes[a];
        }
}

// prmt.b32 (__byte_perm) with selectors 0..7 per nibble: byte n of the result is byte s_n of {y:x}.
uint32_t prmt(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t xy = static_cast<uint64_t>(y) << 32 | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= static_cast<uint32_t>((xy >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
  return r;
}

// One 8-lane phase of a 16-byte access is conflict-free when its 8 addresses fall in 8 distinct
// 16-byte bank groups (32 banks of 4 bytes = 128 bytes).
void expect_conflict_free(const std::array<uint32_t, 32>& addr, const char* what) {
  for (int m = 0; m < 4; ++m) {
    std::set<uint32_t> groups;
    for (int r = 0; r < 8; ++r) {
      EXPECT_EQ(addr[8 * m + r] % 16, 0u) << what;
      groups.insert((addr[8 * m + r] / 16) % 8);
    }
    EXPECT_EQ(groups.size(), 8u) << what << " matrix " << m;
  }
}

// The V^T slot the kernel expects: byte (d, kappa) at swz(d, kappa / 16) + kappa % 16 holds
// V[32 (kappa / 32) + fp8_pv_key(kappa % 32)][d], or 0 for keys >= rows.
template <class Map, int kDv>
std::vector<uint8_t> expected_vt(const std::vector<uint8_t>& v, int rows) {
  std::vector<uint8_t> vt(kVtSlotBytes, 0);
  for (int d = 0; d < kDv; ++d)
    for (int kappa = 0; kappa < 128; ++kappa) {
      const int key = 32 * (kappa / 32) + fp8_pv_key(kappa % 32);
      vt[Map::swz(d, kappa / 16) + kappa % 16] = key < rows ? v[key * kDv + d] : 0;
    }
  return vt;
}

// The kernel's work for one slot: converter warp w takes key groups w, w + warps, ..., each with
// its kDimGroups units; rows < 128 zeroes the keys at or past it (the registers' masks before the
// prmt).
template <class Map>
void transpose_slot(const std::vector<uint8_t>& bytes, std::vector<uint8_t>& vt, std::vector<int>& writes, int warps,
                    int rows) {
  for (int w = 0; w < warps; ++w)
    for (int h = w; h < Map::kKeyGroups; h += warps)
      for (int j = 0; j < Map::kDimGroups; ++j) {
        const int u = Map::kDimGroups * h + j;
        std::array<uint32_t, 32> src{}, dst{};
        for (int l = 0; l < 32; ++l) {
          src[l] = Map::src_offset(l, h, j);
          dst[l] = Map::dst_offset(l, h, j);
          ASSERT_EQ(src[l], Map::src_offset_ref(l, h, j)) << "lane " << l << " unit " << u;
          ASSERT_EQ(dst[l], Map::dst_offset_ref(l, h, j)) << "lane " << l << " unit " << u;
        }
        expect_conflict_free(src, "ldmatrix");
        expect_conflict_free(dst, "stmatrix");
        std::array<std::array<uint32_t, 4>, 32> r{}, o{};
        ldsm_x4_trans(bytes, src, r);
        for (int l = 0; l < 32; ++l) {
          if (rows < 128)
            for (int m = 0; m < 4; ++m) r[l][m] &= Map::key_mask(Map::first_key(l, h, m), rows);
          o[l][0] = prmt(r[l][0], r[l][1], Map::sel0(l));
          o[l][1] = prmt(r[l][0], r[l][1], Map::sel1(l));
          o[l][2] = prmt(r[l][2], r[l][3], Map::sel0(l));
          o[l][3] = prmt(r[l][2], r[l][3], Map::sel1(l));
        }
        stsm_x4(vt, writes, dst, o);
      }
}

template <int kDv>
void check_slots() {
  using Map = VtTransposeMap<128, kDv>;
  std::mt19937 rng(7 + kDv);
  for (const int rows : {128, 127, 100, 65, 64, 17, 16, 1}) {
    for (const int warps : {kConvertWarps, 1, 4}) {
      SCOPED_TRACE(testing::Message() << "dv " << kDv << " rows " << rows << " warps " << warps);
      std::vector<uint8_t> v(128 * kDv);  // V[key][dim], row-major
      for (auto& x : v) x = static_cast<uint8_t>(rng());
      std::vector<uint8_t> bytes(128 * kDv, 0);  // the byte slot as the TMA writes it
      for (int key = 0; key < 128; ++key)
        for (int d = 0; d < kDv; ++d) bytes[Map::swz_src(key, d / 16) + d % 16] = v[key * kDv + d];
      std::vector<uint8_t> vt(kVtSlotBytes, 0xAB);
      std::vector<int> writes(kVtSlotBytes, 0);
      transpose_slot<Map>(bytes, vt, writes, warps, rows);
      if (testing::Test::HasFatalFailure()) return;
      const std::vector<uint8_t> want = expected_vt<Map, kDv>(v, rows);
      int wrong = 0, unwritten = 0;
      for (int a = 0; a < 128 * kDv; ++a) {  // (the V^T slot: kDv rows of 128 bytes)
        wrong += vt[a] != want[a];
        unwritten += writes[a] != 1;
      }
      for (int a = 128 * kDv; a < kVtSlotBytes; ++a) unwritten += writes[a] != 0;  // nothing past it
      EXPECT_EQ(wrong, 0);
      EXPECT_EQ(unwritten, 0);
    }
  }
}

TEST(Sm90Fp8VtTranspose, SlotMatchesThePrePassLayoutD128) { check_slots<128>(); }
// D 64: byte-slot rows of 64 bytes in the 64-byte swizzle (the D 64 tile's K / V chunks).
TEST(Sm90Fp8VtTranspose, SlotMatchesThePrePassLayoutD64) { check_slots<64>(); }

// The selectors realize what the header says: 0x6420 of (matrix 0, matrix 1) words is the even
// dim's four keys in V^T column order, 0x7531 the odd dim's.
TEST(Sm90Fp8VtTranspose, ByteSelectorsPickOneDimsFourKeys) {
  // matrix-0 word: [V(k, d), V(k, d+1), V(k+1, d), V(k+1, d+1)]; matrix-1: the same 8 keys later
  const uint32_t x = 0x44332211u, y = 0x88776655u;
  EXPECT_EQ(prmt(x, y, 0x6420u), 0x77553311u);  // V(k, d), V(k+1, d), V(k+8, d), V(k+9, d)
  EXPECT_EQ(prmt(x, y, 0x7531u), 0x88664422u);  // the same keys at d + 1
  for (int kappa = 0; kappa < 16; ++kappa) {
    const int t = (kappa % 16) / 4, b = kappa % 4;
    EXPECT_EQ(fp8_pv_key(kappa), 8 * (b / 2) + 2 * t + b % 2);
  }
}

}  // namespace
