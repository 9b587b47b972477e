// The cpu backend's ISA paths (src/cpu/cpu_isa.cpp): FA4_CPU_ISA really selects the path it
// names where the machine has it, and the 16-bit product kernels (AMX tiles, vdpbf16ps) agree
// with the reference on the shapes that stress their blocking and padding: head dims that are
// not multiples of 32, packed-row counts that are not multiples of 16 / 32 / 48, key counts that
// are not multiples of the key tile (512 on AMX) or span several, several query tiles, masks
// with partial tiles, splits, paging, and bf16 subnormals (flushed by the matrix units, so those tiles must run in fp32).
//
// CTest runs this binary and the cpu-vs-reference suite once per ISA (tests/CMakeLists.txt).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "core/numeric.h"
#include "cpu/cpu_kernels.h"
#include "test_util.h"

namespace fa4test {
namespace {

// What the machine has, asked independently of the library (CPUID only; the OS parts of the
// library's check — XCR0, the Linux AMX permission — are assumed granted on a test machine).
bool machine_has(const std::string& isa) {
  if (isa == "generic") return true;
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  __get_cpuid_count(7, 0, &a, &b, &c, &d);
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31));
  const bool amx = avx512 && (d & (1u << 24)) && (d & (1u << 22));
  if (isa == "avx2") return avx2;
  if (isa == "avx512") return avx512;
  if (isa == "amx") return amx;
#endif
  return false;
}

std::string plan_kernel(DType dt) {
  CaseConfig cfg;
  cfg.dtype = dt;
  Case c = make_case(cfg, 1);
  fa4::PlanInfo info;
  EXPECT_TRUE(fa4::describe_plan(c.params(Backend::cpu), &info).ok());
  return info.kernel;
}

TEST(CpuIsa, OverrideSelectsTheNamedPathWhereTheMachineHasIt) {
  const char* e = std::getenv("FA4_CPU_ISA");
  const std::string k = plan_kernel(DType::bfloat16);
  std::printf("[fa4 tests] cpu kernel: %s (FA4_CPU_ISA=%s)\n", k.c_str(), e ? e : "unset");
  EXPECT_TRUE(k == "amx" || k == "avx512" || k == "avx2" || k == "generic") << k;
  if (!e) GTEST_SKIP() << "FA4_CPU_ISA unset: the best path ran (" << k << ")";
  if (!machine_has(e)) GTEST_SKIP() << "this machine has no " << e << "; ran " << k;
  EXPECT_EQ(k, std::string(e));
  EXPECT_EQ(plan_kernel(DType::float32), std::string(e));  // one table per process, every dtype
}

void check(const CaseConfig& cfg, uint64_t seed) {
  FA4_SEED_TRACE(seed);
  SCOPED_TRACE(cfg.describe());
  const Case orig = make_case(cfg, seed);
  Case ref = orig, cpu = orig;
  ASSERT_TRUE(ref.run(Backend::reference).ok());
  const Status s = cpu.run(Backend::cpu);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_TRUE(compare_runs(cpu, ref, tol_for(cfg.dtype)));
}

TEST(CpuIsa, SixteenBitTilesEveryPaddingAndBlocking) {
  struct Dims {
    int64_t dqk, dv;
  };
  const Dims dims[] = {{8, 8}, {40, 24}, {64, 64}, {100, 72}, {128, 128}, {192, 128}, {256, 256}};
  int n = 0;
  for (DType dt : {DType::bfloat16, DType::float16, DType::float8_e4m3})
    for (const Dims& d : dims)
      for (int64_t rows : {9, 40, 200})  // packed rows (group x Sq): partial 16-row blocks, 2x2 tails, 2 tiles
        for (int mask = 0; mask < 3; ++mask) {
          CaseConfig c;
          c.dtype = dt;
          c.hkv = 1;
          c.hq = rows == 40 ? 4 : 1;  // 4 x 10 packed GQA rows
          c.sq = rows / c.hq;
          c.sk = d.dqk >= 192 ? 97 : 161;  // a tail of the 64-key tile, and of the 32-key pair block
          c.dqk = d.dqk;
          c.dv = d.dv;
          c.causal = mask == 1;
          if (mask == 2) {
            c.window_left = 37;
            c.window_right = 5;
          }
          c.dist = (n % 3 == 0) ? Dist::outliers : Dist::normal;
          c.descale = dt == DType::float8_e4m3 && n % 2 == 0;
          check(c, derive_seed(61000 + n++));
        }
}

// Several key tiles of the 16-bit kernels (512 keys on AMX): full tiles between partial ones,
// and diagonal / window tiles whose trailing keys no row of the query tile sees (left out).
TEST(CpuIsa, SixteenBitTilesAcrossSeveralKeyTiles) {
  struct Dims {
    int64_t dqk, dv;
  };
  const Dims dims[] = {{64, 64}, {100, 72}, {128, 128}};
  int n = 0;
  for (DType dt : {DType::bfloat16, DType::float16})
    for (const Dims& d : dims)
      for (int64_t sq : {9, 200})
        for (int mask = 0; mask < 3; ++mask) {
          CaseConfig c;
          c.dtype = dt;
          c.sq = sq;
          c.sk = 1100;  // 512 + 512 + 76
          c.dqk = d.dqk;
          c.dv = d.dv;
          c.causal = mask == 1;
          if (mask == 2) {
            c.window_left = 300;
            c.window_right = 40;
          }
          c.dist = (n % 3 == 0) ? Dist::outliers : Dist::normal;
          check(c, derive_seed(65000 + n++));
        }
}

TEST(CpuIsa, SixteenBitTilesWithSplitsPagesSinksSoftcapAndLse) {
  int n = 0;
  for (DType dt : {DType::bfloat16, DType::float16})
    for (int64_t page : {1, 7, 64}) {
      CaseConfig c;
      c.dtype = dt;
      c.kv = KvMode::paged;
      c.page_size = page;
      c.batch = 2;
      c.hq = 8;
      c.hkv = 2;
      c.dqk = c.dv = 64;
      c.sq = 37;
      c.sk = 400;
      c.snew = 3;
      c.causal = true;
      c.sinks = true;
      c.softcap = 30.0f;
      c.num_splits = n % 2 ? 3 : 0;
      check(c, derive_seed(62000 + n++));
    }
}

// The fp32 panel kernels (AVX-512: fp32 inputs everywhere, fp16 / bf16 / fp8 where the table has
// no 16-bit products for them; other ISAs run their own fp32 kernels on the same cases): K packed
// in 8-key blocks and V in 8-dim blocks (head dims 1 .. 256 that are not multiples of 8 or 16
// pad them), 128-key tiles (key counts 1, short, one tile and a tail, several tiles), 48-row
// strips (packed rows 1, 9, 40 = 48 - 8, 100 = 2 x 48 + 4, 200: two query tiles, so pre-packed
// panels), diagonal / window tiles whose strips see fewer keys than the tile.
TEST(CpuIsa, Fp32PanelTilesEveryPaddingAndBlocking) {
  struct Shape {
    int64_t dqk, dv, rows, sk;
  };
  const Shape shapes[] = {{1, 1, 9, 5},        {7, 9, 40, 1},      {17, 33, 100, 129}, {64, 64, 200, 300},
                          {72, 100, 9, 257},  {128, 128, 100, 128}, {128, 128, 200, 700}, {200, 136, 40, 200},
                          {256, 256, 200, 160}, {256, 40, 1, 300},  {8, 8, 200, 1000}};
  int n = 0;
  for (DType dt : {DType::float32, DType::float16})
    for (const Shape& sh : shapes)
      for (int mask = 0; mask < 3; ++mask) {
        CaseConfig c;
        c.dtype = dt;
        c.hkv = 1;
        c.hq = sh.rows % 4 == 0 ? 4 : 1;  // 4 x (rows / 4) packed GQA rows
        c.sq = sh.rows / c.hq;
        c.sk = sh.sk;
        c.dqk = sh.dqk;
        c.dv = sh.dv;
        c.causal = mask == 1;
        if (mask == 2) {
          c.window_left = 60;
          c.window_right = 7;
        }
        c.dist = (n % 3 == 0) ? Dist::outliers : (n % 3 == 1 ? Dist::uniform : Dist::normal);
        check(c, derive_seed(68000 + n++));
      }
}

// The fp32 panel path with every feature around it: GQA, paging with page sizes below and not
// dividing the key tile, appends, splits (the split partials and merge), sinks, softcap (its
// factors in the path's log2 units), lse, varlen, strided (BHSD-like) layouts.
TEST(CpuIsa, Fp32PanelTilesWithSplitsPagesSinksSoftcapAndLse) {
  int n = 0;
  for (int variant = 0; variant < 8; ++variant) {
    CaseConfig c;
    c.dtype = variant == 7 ? DType::float16 : DType::float32;
    c.batch = 2;
    c.hq = 8;
    c.hkv = 2;
    c.dqk = c.dv = variant % 2 ? 80 : 64;
    c.sq = 61;
    c.sk = 333;
    c.causal = variant % 3 != 0;
    c.sinks = variant % 2 == 0;
    c.softcap = variant % 4 == 1 ? 20.0f : 0.0f;
    c.num_splits = variant % 3 == 2 ? 3 : 1;
    if (variant == 2 || variant == 5) {
      c.kv = KvMode::paged;
      c.page_size = variant == 2 ? 7 : 64;
      c.snew = 3;
    }
    if (variant == 3) {
      c.varlen_q = true;
      c.kv = KvMode::varlen;
    }
    if (variant == 4) c.layout = Layout::bhsd;
    if (variant == 6) c.softcap = 1e6f;  // tanh of tiny arguments, in log2 units
    check(c, derive_seed(69000 + n++));
  }
}

// bf16 subnormals (|x| < 2^-126) read as zero in the matrix units and vdpbf16ps; with a huge
// scale they still carry the scores, so such tiles must take the fp32 kernels. Prefill (the
// packed panels) and decode (sq 1, GQA 4: the row-major kernels, vdpbf16ps on AVX512_BF16,
// whose P V redoes a call that read a subnormal V in fp32).
TEST(CpuIsa, Bf16SubnormalInputsKeepTheirWeight) {
  for (int which = 0; which < 6; ++which) {  // % 3 = 0: K subnormal, 1: Q subnormal, 2: V subnormal
    const bool decode = which >= 3;
    CaseConfig cfg;
    cfg.dtype = DType::bfloat16;
    cfg.hkv = 2;
    cfg.hq = decode ? 8 : 2;
    cfg.dqk = cfg.dv = 64;
    cfg.sq = decode ? 1 : 40;
    cfg.sk = 150;
    cfg.scale = which % 3 == 2 ? 0.0f : 1e38f;  // scores ~ 1e-39 * 1e38 * sqrt(64) = O(1)
    const uint64_t seed = derive_seed(63000 + which);
    FA4_SEED_TRACE(seed);
    Case orig = make_case(cfg, seed);
    Tensor& t = which % 3 == 0 ? orig.k : which % 3 == 1 ? orig.q : orig.v;
    for (int64_t off : t.offsets()) t.set(off, t.get(off) * 1e-39f);
    Case ref = orig, cpu = orig;
    ASSERT_TRUE(ref.run(Backend::reference).ok());
    ASSERT_TRUE(cpu.run(Backend::cpu).ok());
    EXPECT_TRUE(compare_runs(cpu, ref, tol_for(cfg.dtype))) << "subnormal operand " << which % 3 << " decode " << decode;
  }
}

// One subnormal bf16 V element in a decode unit over several kv heads (GQA 32 / 8, contiguous:
// the touch pass runs): the touch pass tests the tile's V rows for bf16 subnormals
// (touch_rows_avx512) and a clean tile's P V (vdpbf16ps) tests nothing, so the test must see the
// element wherever it is -- any head, key or dim -- or the element is read as 0. V is 0 elsewhere,
// so the output of its head is that element's weight alone. The element sits in the last key tile
// (full at sk 64, partial at sk 40): vdpbf16ps also flushes a subnormal fp32 accumulator, so a
// subnormal O from an earlier tile does not survive a later clean tile's P V (docs/perf/cpu.md,
// 2026-12-07 09:40: outputs below 2^-126 in magnitude, a limit of the vdpbf16ps decode before this).
TEST(CpuIsa, Bf16SubnormalVElementOfADecodeTileKeepsItsWeight) {
  struct At {
    int64_t sk, key, h, d;
  };
  int n = 0;
  for (const At at : {At{40, 32, 0, 0}, At{40, 37, 5, 70}, At{40, 39, 7, 127}, At{64, 32, 3, 31}, At{64, 47, 6, 96},
                      At{64, 63, 1, 127}})
    for (int64_t sq : {1, 2}) {
      CaseConfig cfg;
      cfg.dtype = DType::bfloat16;
      cfg.hkv = 8;
      cfg.hq = 32;
      cfg.dqk = cfg.dv = 128;
      cfg.sq = sq;
      cfg.sk = at.sk;
      const uint64_t seed = derive_seed(63100 + n++);
      FA4_SEED_TRACE(seed);
      Case orig = make_case(cfg, seed);
      for (int64_t off : orig.v.offsets()) orig.v.set(off, 0.0f);
      orig.v.set(orig.v.off({0, at.key, at.h, at.d}), -1.1e-38f);  // bf16 subnormal (below 2^-126)
      Case ref = orig, cpu = orig;
      ASSERT_TRUE(ref.run(Backend::reference).ok());
      ASSERT_TRUE(cpu.run(Backend::cpu).ok());
      EXPECT_TRUE(compare_runs(cpu, ref, tol_for(cfg.dtype)))
          << "sk " << at.sk << " key " << at.key << " head " << at.h << " dim " << at.d << " sq " << sq;
    }
}

// Scores beyond fp32 on the 16-bit paths: the AMX table leaves the scale and the extreme-score
// check (|s| >= kExtremeScore = 2^16 or NaN, visible, before softcap) to the softmax step, which must flag the
// same rows the separate check did; flagged rows are recomputed in fp64 (the reference's result).
TEST(CpuIsa, SixteenBitScoresBeyondFp32GiveTheReferenceResult) {
  int n = 0;
  for (bool causal : {false, true})
    for (float softcap : {0.0f, 50.0f})
      for (float kval : {3e38f, -3e38f}) {
        CaseConfig cfg;
        cfg.dtype = DType::bfloat16;
        cfg.hq = cfg.hkv = 2;
        cfg.dqk = cfg.dv = 64;
        cfg.sq = 200;
        cfg.sk = 300;
        cfg.causal = causal;
        cfg.softcap = softcap;
        cfg.scale = 1.0f;  // |q0| > 0.57: a score beyond 2^127; > 1.13: beyond FLT_MAX (inf)
        const uint64_t seed = derive_seed(64000 + n++);
        FA4_SEED_TRACE(seed);
        Case orig = make_case(cfg, seed);
        for (int64_t h = 0; h < cfg.hkv; ++h) orig.k.set(orig.k.off({0, 150, h, 0}), kval);  // k [B, Sk, Hkv, D]
        Case ref = orig, cpu = orig;
        ASSERT_TRUE(ref.run(Backend::reference).ok());
        ASSERT_TRUE(cpu.run(Backend::cpu).ok());
        EXPECT_TRUE(compare_runs(cpu, ref, tol_for(cfg.dtype)))
            << "causal " << causal << " softcap " << softcap << " k " << kval;
      }
}

// ---- e4m3 conversions: every vector path of the table FA4_CPU_ISA selected agrees with the
// scalar definition (core/numeric.h e4m3_to_f32) on all 256 bytes: NaN (0x7f, 0xff), the
// subnormals, +-0, +-448. The fp8 KV cache's kernels read e4m3 rows through these.
namespace cpuk = fa4::core::cpu;

// Same value (NaN for NaN); sign of zero too where `zero_sign` (the products and sums of the
// kernels below start from +0, so -0 comes out as +0 there).
bool same(float got, float want, bool zero_sign) {
  if (std::isnan(want)) return std::isnan(got);
  if (got != want) return false;
  return !zero_sign || want != 0.0f || std::signbit(got) == std::signbit(want);
}

TEST(CpuIsa, E4m3ConversionsAgreeWithTheScalarDefinitionForEveryByte) {
  const cpuk::Kernels& K = cpuk::best_kernels();
  SCOPED_TRACE(K.name);
  float want[256];
  for (int b = 0; b < 256; ++b) want[b] = fa4::core::e4m3_to_f32(static_cast<uint8_t>(b));
  ASSERT_TRUE(std::isnan(want[0x7f]) && std::isnan(want[0xff]) && want[0x7e] == 448.0f && want[0xfe] == -448.0f);
  // The tables.
  for (int b = 0; b < 256; ++b) {
    EXPECT_TRUE(same(cpuk::e4m3_lut()[b], want[b], true)) << b;
    if (b < 128) {
      EXPECT_TRUE(same(fa4::core::bf16_to_f32(cpuk::e4m3_bf16_lut()[b]), want[b], true)) << b;
    }
  }
  // convert: unit stride (the vector loop plus its tail) and strided.
  uint8_t bytes[256], strided[3 * 256];
  for (int b = 0; b < 256; ++b) bytes[b] = strided[3 * b] = static_cast<uint8_t>(b);
  float got[256];
  for (int64_t stride : {1, 3}) {
    K.convert(stride == 1 ? bytes : strided, DType::float8_e4m3, stride, 256, got);
    for (int b = 0; b < 256; ++b) EXPECT_TRUE(same(got[b], want[b], true)) << "convert stride " << stride << " byte " << b;
  }
  // Row-major decode kernels: key n = byte n at every dim of its row (dims 32 and 64 exercise
  // every lane of the loaders); q one-hot at dim c reads K[n][c], p one-hot reads V[n][*].
  if (K.qk_rows) {
    for (int64_t d : {32, 64}) {
      std::vector<uint8_t> rows(static_cast<size_t>(256 * d));
      std::vector<const void*> ptr(256);
      for (int n = 0; n < 256; ++n) {
        std::fill(rows.begin() + n * d, rows.begin() + (n + 1) * d, static_cast<uint8_t>(n));
        ptr[static_cast<size_t>(n)] = rows.data() + n * d;
      }
      for (int64_t c = 0; c < d; ++c) {  // q rows: row r one-hot at dim (c + r) % d
        const int64_t R = 4;
        std::vector<float> q(static_cast<size_t>(R * d), 0.0f), st(256 * 8);
        for (int64_t r = 0; r < R; ++r) q[static_cast<size_t>(r * d + (c + r) % d)] = 1.0f;
        // Keys whose other dims would be NaN x 0: the NaN rows hold NaN everywhere, so only
        // the one-hot dim's value matters for the rest.
        K.qk_rows(q.data(), R, d, ptr.data(), DType::float8_e4m3, 256, st.data());
        for (int n = 0; n < 256; ++n)
          for (int64_t r = 0; r < R; ++r)
            ASSERT_TRUE(same(st[static_cast<size_t>(n * 8 + r)], want[n], false))
                << "qk_rows d " << d << " dim " << c << " byte " << n << " got " << st[static_cast<size_t>(n * 8 + r)];
      }
      for (int n = 0; n < 256; ++n) {
        const float pt[8] = {1, 1, 1, 1, 1, 1, 1, 1}, alpha[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        std::vector<float> o(static_cast<size_t>(8 * d), 0.0f);
        K.pv_rows(pt, 3, 1, &ptr[static_cast<size_t>(n)], DType::float8_e4m3, d, alpha, o.data());
        for (int64_t i = 0; i < 3 * d; ++i)
          ASSERT_TRUE(same(o[static_cast<size_t>(i)], want[n], false)) << "pv_rows d " << d << " element " << i << " byte " << n;
      }
      // 7 / 8 rows over 70 keys (the AVX2 table broadcasts P into blocks of 64 keys there, alpha
      // on the first block only): the byte's row at key 65, zero rows elsewhere, O = 4 and
      // alpha 0.5 before: O = 2 + V.
      const std::vector<uint8_t> zero(static_cast<size_t>(d), 0);
      for (int64_t R : {7, 8})
        for (int n = 0; n < 256; ++n) {
          std::vector<const void*> keys(70, zero.data());
          keys[65] = ptr[static_cast<size_t>(n)];
          std::vector<float> pt(70 * 8, 0.0f), o(static_cast<size_t>(8 * d), 4.0f);
          for (int64_t r = 0; r < 8; ++r) pt[static_cast<size_t>(65 * 8 + r)] = 1.0f;
          const float alpha[8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
          K.pv_rows(pt.data(), R, 70, keys.data(), DType::float8_e4m3, d, alpha, o.data());
          for (int64_t i = 0; i < R * d; ++i)
            ASSERT_TRUE(same(o[static_cast<size_t>(i)], 2.0f + want[n], false))
                << "pv_rows rows " << R << " d " << d << " element " << i << " byte " << n;
        }
    }
  }
  // Panel packers (16-bit: bf16 bits, lo term 0; fp32 panels): 256 keys x 48 dims, key n =
  // byte (n + dim) % 256 so every byte lands in every lane position over the dims.
  const int64_t n = 256, d = 48;
  std::vector<uint8_t> rows(static_cast<size_t>(n * d));
  std::vector<const void*> ptr(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t c = 0; c < d; ++c) rows[static_cast<size_t>(j * d + c)] = static_cast<uint8_t>((j + c) % 256);
    ptr[static_cast<size_t>(j)] = rows.data() + j * d;
  }
  auto byte_at = [&](int64_t j, int64_t c) { return (j + c) % 256; };
  for (const cpuk::LowpKernels* L : {K.lowp_bf16, K.lowp_f16}) {
    if (!L) continue;
    for (int terms : {1, 2}) {
      const int64_t dp = (d + 31) / 32 * 32, np = (n + 31) / 32 * 32, dvp = (d + 15) / 16 * 16;
      std::vector<uint16_t> kb(static_cast<size_t>(terms * np * dp)), vt(static_cast<size_t>(terms * dvp * np));
      const int kf = L->pack_k(ptr.data(), DType::float8_e4m3, n, d, terms, kb.data());
      const int vf = L->pack_v(ptr.data(), DType::float8_e4m3, n, d, terms, vt.data());
      EXPECT_EQ(kf, cpuk::LowpKernels::kNonFinite);  // never kTiny: e4m3's smallest is 2^-9
      EXPECT_EQ(vf, cpuk::LowpKernels::kNonFinite);
      for (int64_t j = 0; j < n; ++j)
        for (int64_t c = 0; c < d; ++c) {
          const float w = want[byte_at(j, c)];
          ASSERT_TRUE(same(fa4::core::bf16_to_f32(kb[static_cast<size_t>(j * dp + c)]), w, true)) << "pack_k " << j << " " << c;
          ASSERT_TRUE(same(fa4::core::bf16_to_f32(vt[static_cast<size_t>(c * np + j)]), w, true)) << "pack_v " << j << " " << c;
          if (terms == 2 && !std::isnan(w)) {  // the lo term: 0 (NaN for NaN)
            EXPECT_EQ(kb[static_cast<size_t>(np * dp + j * dp + c)] & 0x7fff, 0);
            EXPECT_EQ(vt[static_cast<size_t>(dvp * np + c * np + j)] & 0x7fff, 0);
          }
        }
    }
  }
  if (const cpuk::F32Panels* F = K.f32p) {
    std::vector<float> kp(static_cast<size_t>(cpuk::F32Panels::kp_elems(n, d))),
        vp(static_cast<size_t>(cpuk::F32Panels::vp_elems(n, d)));
    F->pack_k(ptr.data(), DType::float8_e4m3, n, d, kp.data());
    EXPECT_EQ(F->pack_v(ptr.data(), DType::float8_e4m3, n, n, d, vp.data()), cpuk::LowpKernels::kNonFinite);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < d; ++c) {
        const float w = want[byte_at(j, c)];
        ASSERT_TRUE(same(kp[static_cast<size_t>((j / 8) * d * 8 + c * 8 + j % 8)], w, true)) << "f32 pack_k " << j << " " << c;
        ASSERT_TRUE(same(vp[static_cast<size_t>(((c / 8) * n + j) * 8 + c % 8)], w, true)) << "f32 pack_v " << j << " " << c;
      }
  }
}

}  // namespace
}  // namespace fa4test
