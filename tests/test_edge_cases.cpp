// Edge cases: tiny and empty lengths, non-finite inputs, never-read cache tails, strides,
// very negative scores, and 64-bit offsets (computed through core::normalize on views whose
// data is never dereferenced).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/problem.h"
#include "test_util.h"
#include "tiny.h"

namespace fa4test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInfF = std::numeric_limits<float>::infinity();

// Runs reference and cpu on copies of c; returns them (ref, cpu).
std::pair<Case, Case> run_both(const Case& c) {
  Case ref = c, cpu = c;
  const Status a = ref.run(Backend::reference);
  const Status b = cpu.run(Backend::cpu);
  EXPECT_TRUE(a.ok()) << a.message;
  EXPECT_TRUE(b.ok()) << b.message;
  return {std::move(ref), std::move(cpu)};
}

// Which (b, i, h) rows are non-finite in `c`'s output.
template <class Pred>
void expect_nonfinite_rows_exactly(const Case& c, Pred bad_row, const char* what) {
  int64_t wrong = 0;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < c.lq[b]; ++i)
      for (int64_t h = 0; h < c.cfg.hq; ++h) {
        const bool expect_bad = bad_row(b, i, h);
        for (int64_t d = 0; d < c.cfg.dv; ++d) {
          const float x = c.out.get(c.out_off(b, i, h, d));
          if (expect_bad ? std::isfinite(x) : !std::isfinite(x)) {
            if (wrong++ < 5)
              ADD_FAILURE() << what << ": out(b=" << b << ", i=" << i << ", h=" << h << ", d=" << d << ") = " << x
                            << (expect_bad ? " should be non-finite" : " should be finite");
          }
        }
      }
  EXPECT_EQ(wrong, 0) << what << " [" << c.cfg.describe() << "]";
}

CaseConfig small_cfg() {
  CaseConfig c;
  c.batch = 3;
  c.sq = 6;
  c.sk = 9;
  c.hq = 4;
  c.hkv = 2;
  c.dqk = 16;
  c.dv = 12;
  return c;
}

// ---------------------------------------------------------------- lengths 0 and 1
TEST(EdgeCases, QueryAndKeyLengthsZeroAndOne) {
  int n = 0;
  for (int64_t sq : {0, 1, 2})
    for (int64_t sk : {0, 1, 2})
      for (bool causal : {false, true})
        for (KvMode kv : {KvMode::dense, KvMode::cache, KvMode::paged}) {
          CaseConfig cfg = small_cfg();
          cfg.sq = sq;
          cfg.sk = sk;
          cfg.causal = causal;
          cfg.kv = kv;
          cfg.page_size = 1;
          cfg.cache_seqlens = false;  // full caches of length sk
          const uint64_t seed = derive_seed(60000 + n++);
          FA4_SEED_TRACE(seed);
          auto [ref, cpu] = run_both(make_case(cfg, seed));
          EXPECT_TRUE(compare_runs(cpu, ref, tol_for(cfg.dtype)));
          EXPECT_TRUE(compare_expected(ref, naive_attention(ref), tol_for(cfg.dtype)));
        }
}

TEST(EdgeCases, MoreQueriesThanKeysWithCausalMaskGivesEmptyTopRows) {
  for (bool sinks : {false, true})
    for (int32_t splits : {1, 2, 0}) {
      CaseConfig cfg = small_cfg();
      cfg.sq = 20;
      cfg.sk = 5;
      cfg.causal = true;
      cfg.sinks = sinks;
      cfg.num_splits = splits;
      const uint64_t seed = derive_seed(61000 + splits + (sinks ? 10 : 0));
      FA4_SEED_TRACE(seed);
      auto [ref, cpu] = run_both(make_case(cfg, seed));
      for (const Case* c : {&ref, &cpu})
        for (int64_t b = 0; b < c->B; ++b)
          for (int64_t h = 0; h < cfg.hq; ++h)
            for (int64_t i = 0; i < 15; ++i) {  // off = -15: rows 0..14 see nothing
              for (int64_t d = 0; d < cfg.dv; ++d) EXPECT_EQ(c->out.get(c->out_off(b, i, h, d)), 0.0f);
              const float l = c->lse.get(c->lse_off(b, h, i));
              if (sinks) EXPECT_NEAR(l, c->sinks.get(h), 1e-6);  // only the sink: not empty
              else EXPECT_EQ(l, -kInfF);
            }
      EXPECT_TRUE(compare_runs(cpu, ref, tol_for(cfg.dtype)));
    }
}

TEST(EdgeCases, FullyMaskedRowsInsideTheSequenceAreEmpty) {
  // window (0, 0) with Sq > Sk and a chunk: plenty of rows with no visible key at all.
  for (bool sinks : {false, true}) {
    CaseConfig cfg = small_cfg();
    cfg.sq = 12;
    cfg.sk = 4;
    cfg.window_left = 0;
    cfg.window_right = 0;
    cfg.sinks = sinks;
    const uint64_t seed = derive_seed(62000 + sinks);
    FA4_SEED_TRACE(seed);
    auto [ref, cpu] = run_both(make_case(cfg, seed));
    EXPECT_TRUE(compare_runs(cpu, ref, tol_for(cfg.dtype)));  // checks exact 0 / -inf of empty rows
  }
}

TEST(EdgeCases, VeryNegativeButEqualScoresAreNotEmptyRows) {
  for (Backend be : {Backend::reference, Backend::cpu})
    for (float mag : {100.0f, 1e4f, 1e15f}) {
      Tiny t(1, 2, 5, 1, 1, 1);
      for (int64_t i = 0; i < 2; ++i) t.Q(0, i, 0, 0) = mag;
      for (int64_t j = 0; j < 5; ++j) {
        t.K(0, j, 0, 0) = -mag;  // score -mag^2: finite, hugely negative, equal for every key
        t.V(0, j, 0, 0) = static_cast<float>(j);
      }
      t.p.scale = 1.0f;
      ASSERT_TRUE(t.run(be).ok());
      const double s = -static_cast<double>(mag) * mag;
      SCOPED_TRACE(std::string(fa4::backend_name(be)) + " magnitude " + std::to_string(mag));
      for (int64_t i = 0; i < 2; ++i) {
        EXPECT_NEAR(t.O(0, i, 0, 0), 2.0f, 1e-5);  // mean of 0..4
        EXPECT_NEAR(t.L(0, 0, i), static_cast<float>(s + std::log(5.0)), std::fabs(s) * 1e-6 + 1e-5);
      }
    }
}

// Fuzz findings new02 / new03 (tests/fuzz/corpus/new0[23]_*): fp32 scores that overflow — one k
// element of 3e38 with D = 2, or scale = 1e37 with softcap 1 and D = 128, where partial sums of
// the dot product reach +inf and -inf (NaN) — gave NaN rows on cpu where the reference is finite.
// cpu recomputes a row with a visible score that is NaN, +-inf or >= 2^16 in fp64 (as reference
// does); non-finite values (lse = -inf where every logit is below -FLT_MAX) must match exactly. Covers the
// transposed and row-major kernels, sinks, softcap, and forced splits (flag carried to the merge).
TEST(EdgeCases, ScoresBeyondFp32GiveTheReferenceResult) {
  struct Cfg {
    int64_t d, sq, sk;
    float kval;     // set in dim 0 of key 0 of (b = 1, kv head 1), or of every key (all_keys); 0 = none
    bool all_keys;  // every key's logit overflows for the rows with q[0] of the right sign
    float scale, softcap, amp;
    bool sinks;
    int32_t splits;
  };
  const Cfg cfgs[] = {
      {2, 9, 1, 3e38f, false, 0, 0, 4, false, 1},      // new02: transposed, a single key
      {2, 9, 5, -3e38f, true, 0, 0, 4, false, 1},      // rows whose logits are all < -FLT_MAX
      {128, 3, 3, 0, false, 1e37f, 1, 16, true, 1},    // new03: row-major kernels, softcap, sinks
      {8, 4, 400, 3e38f, false, 0, 0, 4, true, 3},     // row-major, split-KV
      {16, 40, 400, -3e38f, true, 0, 0, 8, false, 3},  // transposed, split-KV
      {128, 20, 70, 0, false, 1e37f, 1, 16, true, 2},
  };
  std::mt19937_64 rng(20261201);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Cfg& c : cfgs) {
    Tiny t(2, c.sq, c.sk, 4, 2, c.d);
    for (float& x : t.q) x = u(rng) * c.amp;
    for (float& x : t.k) x = u(rng) * c.amp;
    for (float& x : t.v) x = u(rng) * 2.0f;
    if (c.kval != 0.0f)
      for (int64_t j = 0; j < (c.all_keys ? c.sk : 1); ++j) t.K(1, j, 1, 0) = c.kval;
    if (c.sinks) t.sinks = {0.5f, -1.0f, 2.0f, 0.0f};
    t.p.scale = c.scale;
    t.p.softcap = c.softcap;
    t.p.num_splits = c.splits;
    SCOPED_TRACE("d=" + std::to_string(c.d) + " sq=" + std::to_string(c.sq) + " sk=" + std::to_string(c.sk) +
                 " splits=" + std::to_string(c.splits));
    ASSERT_TRUE(t.run(Backend::reference).ok());
    const std::vector<float> ro = t.out, rl = t.lse;
    ASSERT_TRUE(t.run(Backend::cpu).ok());
    // Rows with a logit beyond FLT_MAX are recomputed in fp64: bit-equal to reference. Rows with
    // large but fp32 logits (> 32, as the fuzzer's oracle) keep fp32's rounding, which can
    // flatten near ties at that scale: finite, inside the hull of V, non-finite lse exact. The
    // others: the usual tolerance.
    int64_t beyond = 0;
    for (int64_t b = 0; b < t.B; ++b)
      for (int64_t h = 0; h < t.Hq; ++h)
        for (int64_t i = 0; i < t.Sq; ++i) {
          const double sc = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.d));
          double mx = 0;
          for (int64_t j = 0; j < t.Sk; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < t.D; ++d) dot += static_cast<double>(t.Q(b, i, h, d)) * t.K(b, j, h / 2, d);
            mx = std::max(mx, std::fabs(sc * dot));
          }
          const bool over = mx > std::numeric_limits<float>::max(), large = mx > 32;
          beyond += over;
          const std::string row = "(" + std::to_string(b) + ", " + std::to_string(i) + ", " + std::to_string(h) + ")";
          const size_t l = static_cast<size_t>((b * t.Hq + h) * t.Sq + i);
          for (int64_t d = 0; d < t.Dv; ++d) {
            const size_t o = static_cast<size_t>(((b * t.Sq + i) * t.Hq + h) * t.Dv + d);
            ASSERT_TRUE(std::isfinite(ro[o]));  // V is finite: so is every reference row
            ASSERT_TRUE(std::isfinite(t.out[o])) << "out" << row << " d=" << d;
            if (over) EXPECT_EQ(std::memcmp(&ro[o], &t.out[o], sizeof(float)), 0) << "out" << row << " d=" << d << ": " << t.out[o] << " vs " << ro[o];
            else if (large) EXPECT_LE(std::fabs(t.out[o]), 2.0f) << "out" << row << " d=" << d << " outside the hull of V";
            else EXPECT_NEAR(t.out[o], ro[o], 1e-4) << "out" << row << " d=" << d;
          }
          if (over) EXPECT_EQ(std::memcmp(&rl[l], &t.lse[l], sizeof(float)), 0) << "lse" << row << ": " << t.lse[l] << " vs " << rl[l];
          else if (!std::isfinite(rl[l])) EXPECT_EQ(t.lse[l], rl[l]) << "lse" << row;
          else if (!large) EXPECT_NEAR(t.lse[l], rl[l], 1e-4) << "lse" << row;
          else EXPECT_TRUE(std::isfinite(t.lse[l])) << "lse" << row;
        }
    EXPECT_GT(beyond, 0) << "the case does not reach scores beyond fp32";
  }
}

// Scores with a large common offset (every logit of a row near 2^20, spread by O(1)): the
// softmax does not depend on the offset, but an fp32 logit of 2^20 is only within 2^-4 of
// exact, so such a row's weights would be off by up to ~10 %. cpu sends rows with a logit of
// magnitude >= 2^16 to its fp64 path (kExtremeScore, cpu_kernels.h; the 16-bit softmax's fused
// exponent relies on the bound too), which the reference matches bit for bit. bf16 inputs (the
// AMX / vdpbf16ps products on those paths), full and causal-diagonal tiles, 600 keys (a full
// 512-key tile and a partial one), forced splits; every ISA path.
TEST(EdgeCases, LargeCommonScoreOffsetGivesTheReferenceResult) {
  for (bool causal : {false, true})
    for (int32_t splits : {1, 2}) {
      CaseConfig cfg;
      cfg.dtype = DType::bfloat16;
      cfg.batch = 1;
      cfg.hq = 2;
      cfg.hkv = 1;
      cfg.dqk = cfg.dv = 64;
      cfg.sq = 40;
      cfg.sk = 600;
      cfg.causal = causal;
      cfg.scale = 1.0f;
      cfg.num_splits = splits;
      Case c = make_case(cfg, 77 + splits);
      // q[0] = k[0] = 1024 (exact in bf16): every logit gets 2^20 on top of the rest's N(0, 63).
      for (int64_t i = 0; i < c.lq[0]; ++i)
        for (int64_t h = 0; h < cfg.hq; ++h) c.q.set(c.q_off(0, i, h, 0), 1024.0f);
      for (int64_t j = 0; j < c.capacity; ++j) {
        int64_t off = 0;
        const Tensor& kt = c.key_src(0, j, 0, 0, false, &off);
        const_cast<Tensor&>(kt).set(off, 1024.0f);
      }
      SCOPED_TRACE(std::string(causal ? "causal" : "non-causal") + " splits " + std::to_string(splits));
      Case ref = c, cpu = c;
      ASSERT_TRUE(ref.run(Backend::reference).ok());
      ASSERT_TRUE(cpu.run(Backend::cpu).ok());
      EXPECT_TRUE(bitwise_equal(cpu, ref));
    }
}

TEST(EdgeCases, MinusInfinitySinkIsLikeNoSink) {
  CaseConfig cfg = small_cfg();
  cfg.causal = true;
  cfg.sq = 12;  // some empty rows
  cfg.sk = 5;
  const uint64_t seed = derive_seed(63000);
  FA4_SEED_TRACE(seed);
  Case c = make_case(cfg, seed);
  Case with = c;
  with.sinks = Tensor::make_f32_1d(std::vector<float>(cfg.hq, -kInfF));
  for (Backend be : {Backend::reference, Backend::cpu}) {
    Case a = c, b = with;
    ASSERT_TRUE(a.run(be).ok());
    ASSERT_TRUE(b.run(be).ok());
    b.sinks = a.sinks;  // compare outputs only (the inputs differ by the sink tensor on purpose)
    EXPECT_TRUE(compare_runs(b, a, tol_for(cfg.dtype))) << fa4::backend_name(be);
  }
}

// ---------------------------------------------------------------- NaN / Inf
TEST(EdgeCases, NanInOneQueryRowOnlyPoisonsThatRow) {
  for (bool causal : {false, true})
    for (int32_t splits : {1, 3}) {
      CaseConfig cfg = small_cfg();
      cfg.causal = causal;
      cfg.num_splits = splits;
      const uint64_t seed = derive_seed(64000 + splits + causal * 10);
      FA4_SEED_TRACE(seed);
      Case c = make_case(cfg, seed);
      c.q.set(c.q_off(1, 4, 3, 5), kNaN);
      auto [ref, cpu] = run_both(c);
      auto bad = [](int64_t b, int64_t i, int64_t h) { return b == 1 && i == 4 && h == 3; };
      expect_nonfinite_rows_exactly(ref, bad, "reference");
      expect_nonfinite_rows_exactly(cpu, bad, "cpu");
      EXPECT_TRUE(std::isnan(cpu.lse.get(cpu.lse_off(1, 3, 4))));
      EXPECT_TRUE(compare_runs(cpu, ref, tol_for(cfg.dtype)));
    }
}

TEST(EdgeCases, NanInKOrVOfOneSequenceAndHeadStaysThere) {
  int n = 0;
  for (bool value : {false, true})
    for (KvMode kv : {KvMode::dense, KvMode::varlen, KvMode::paged})
      for (bool causal : {false, true}) {
        CaseConfig cfg = small_cfg();
        cfg.kv = kv;
        cfg.causal = causal;
        cfg.page_size = 2;
        cfg.lens_k = {9, 9, 9};  // every sequence has key 3 in varlen / paged
        cfg.num_splits = n % 2 ? 2 : 1;
        const uint64_t seed = derive_seed(65000 + n++);
        FA4_SEED_TRACE(seed);
        Case c = make_case(cfg, seed);
        const int64_t B0 = 2, J = 3, HK = 1;  // poison key 3 of sequence 2, kv head 1
        for (int64_t d = 0; d < (value ? cfg.dv : cfg.dqk); ++d) {
          int64_t o;
          Tensor& t = const_cast<Tensor&>(c.key_src(B0, J, HK, d, value, &o));
          t.set(o, kNaN);
        }
        auto [ref, cpu] = run_both(c);
        const Case& cc = cpu;
        auto bad = [&](int64_t b, int64_t i, int64_t h) { return b == B0 && h / 2 == HK && cc.visible(b, i, J); };
        expect_nonfinite_rows_exactly(ref, bad, "reference");
        expect_nonfinite_rows_exactly(cpu, bad, "cpu");
        EXPECT_TRUE(compare_runs(cpu, ref, tol_for(cfg.dtype)));
      }
}

// Keys that are in the sequence but masked out for a row do not enter that row: NaN there must
// not reach it (the reference never touches them; "IEEE propagation" is about values used).
TEST(EdgeCases, NanInAMaskedOutKeyDoesNotReachTheRowsThatCannotSeeIt) {
  int n = 0;
  for (bool value : {false, true})
    for (int64_t sk : {9, 70}) {
      CaseConfig cfg = small_cfg();
      cfg.sq = sk;
      cfg.sk = sk;
      cfg.causal = true;
      const uint64_t seed = derive_seed(66000 + n++);
      FA4_SEED_TRACE(seed);
      Case c = make_case(cfg, seed);
      const int64_t J = sk - 2;  // visible to the last two rows only
      for (int64_t d = 0; d < (value ? cfg.dv : cfg.dqk); ++d) {
        int64_t o;
        Tensor& t = const_cast<Tensor&>(c.key_src(0, J, 0, d, value, &o));
        t.set(o, kNaN);
      }
      auto [ref, cpu] = run_both(c);
      auto bad = [&](int64_t b, int64_t i, int64_t h) { return b == 0 && h / 2 == 0 && i >= J; };
      expect_nonfinite_rows_exactly(ref, bad, "reference");
      expect_nonfinite_rows_exactly(cpu, bad, "cpu");
    }
}

// The same for decode-sized tiles (<= 8 packed query rows: one or two query tokens of a GQA group),
// which backends often run through a separate code path.
TEST(EdgeCases, NanInAMaskedOutKeyDoesNotReachDecodeRows) {
  int n = 0;
  for (bool value : {false, true})
    for (DType dt : {DType::float32, DType::bfloat16})
      for (int variant = 0; variant < 2; ++variant) {
        CaseConfig cfg;
        cfg.dtype = dt;
        cfg.batch = 2;
        cfg.hq = 8;
        cfg.hkv = 2;  // group 4
        cfg.dqk = cfg.dv = 64;
        cfg.sk = 100;
        int64_t J;
        if (variant == 0) {  // one token, sliding window: key 86 is outside [89, 99]
          cfg.sq = 1;
          cfg.window_left = 10;
          J = 86;
        } else {  // two tokens, causal: the last key is hidden from the first token
          cfg.sq = 2;
          cfg.causal = true;
          J = 99;
        }
        const uint64_t seed = derive_seed(66500 + n++);
        FA4_SEED_TRACE(seed);
        Case c = make_case(cfg, seed);
        for (int64_t d = 0; d < (value ? cfg.dv : cfg.dqk); ++d) {
          int64_t o;
          Tensor& t = const_cast<Tensor&>(c.key_src(1, J, 1, d, value, &o));
          t.set(o, kNaN);
        }
        auto [ref, cpu] = run_both(c);
        const Case& cc = cpu;
        auto bad = [&](int64_t b, int64_t i, int64_t h) { return b == 1 && h / 4 == 1 && cc.visible(b, i, J); };
        expect_nonfinite_rows_exactly(ref, bad, "reference");
        expect_nonfinite_rows_exactly(cpu, bad, "cpu");
      }
}

// An infinite V behind a visible key whose weight underflows in fp32 (its score ~250 or more below
// the row max): the weight exp(s - m) is > 0 in exact arithmetic, so the output is +-inf (as the
// fp64 reference gives), not 0 * inf = NaN. Full tiles (no mask: the fuzz finding new10, the
// causal-0 mutation of new09, reached the vector P V kernels; new09's partial tiles were fixed
// first) on every path of the ISA under test: transposed tiles (16-bit products where the ISA has
// them, fp32 otherwise), pre-packed panels (several query tiles), the row-major decode kernels;
// the inf before the row max (a later rescale alpha = exp(m_old - m_new) underflows with O = inf)
// and after it; split-KV (the split holding the inf has a merge weight that underflows); a sink
// far above every score (O's final factor underflows).
// Q > 0 everywhere, key J_BIG = +mag and key J_INF = -mag (4 unless noted) in every dim (scale 1, D 64: scores
// +-[128, 384], the other keys ~N(0, 8)); V of J_INF at (b 0, kv head 0) is +inf in dim 0, -inf
// in dim 1: exactly those elements of the rows reading that kv head are +-inf, all others finite.
TEST(EdgeCases, InfiniteVBehindAnUnderflowedWeightIsInfiniteOnFullTiles) {
  struct Scenario {
    const char* name;
    int64_t sq, hq, hkv, sk, j_inf, j_big;
    int32_t splits;
    bool sink;
    float mag = 4.0f;  // |K| of keys J_BIG / J_INF in every dim
  };
  const Scenario scenarios[] = {
      {"transposed, one key tile", 16, 4, 2, 20, 5, 12, 1, false},
      {"transposed, max first", 16, 4, 2, 20, 12, 5, 1, false},
      {"panels, several query tiles", 128, 2, 1, 40, 7, 30, 1, false},
      {"inf in an earlier key tile than the max", 16, 2, 1, 600, 3, 590, 1, false},
      {"max in an earlier key tile than the inf", 16, 2, 1, 600, 590, 3, 1, false},
      {"decode rows (odd key count)", 1, 8, 2, 21, 5, 12, 1, false},
      {"decode rows, inf in an earlier key tile", 1, 8, 2, 600, 3, 590, 1, false},
      {"splits, inf in the split of low weight", 16, 2, 1, 600, 3, 590, 2, false},
      {"decode splits, inf in the split of low weight", 1, 4, 1, 600, 3, 590, 3, false},
      {"sink far above the scores", 16, 2, 1, 20, 5, 12, 1, true},
      {"decode rows, sink far above the scores", 2, 4, 1, 20, 5, 12, 1, true},
      // |K| 0.74: the inf's score is 95 +- 7 below the max, a weight of 2^-137 +- 10 -- subnormal
      // in fp32, 0 in bf16 (the 16-bit P and the matrix units flush it).
      {"transposed, weight subnormal in fp32", 16, 4, 2, 20, 5, 12, 1, false, 0.74f},
      {"panels, weight subnormal in fp32", 128, 2, 1, 40, 7, 30, 1, false, 0.74f},
  };
  int n = 0;
  for (DType dt : {DType::float32, DType::float16, DType::bfloat16})
    for (const Scenario& sc : scenarios) {
      CaseConfig cfg;
      cfg.dtype = dt;
      cfg.batch = 2;
      cfg.sq = sc.sq;
      cfg.sk = sc.sk;
      cfg.hq = sc.hq;
      cfg.hkv = sc.hkv;
      cfg.dqk = cfg.dv = 64;
      cfg.scale = 1.0f;
      cfg.num_splits = sc.splits;
      cfg.sinks = sc.sink;
      const uint64_t seed = derive_seed(67500 + n++);
      FA4_SEED_TRACE(seed);
      SCOPED_TRACE(std::string(sc.name) + " " + dtype_str(dt));
      Case c = make_case(cfg, seed);
      std::mt19937_64 rng(seed);
      std::uniform_real_distribution<float> pos(0.5f, 1.5f);
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t i = 0; i < c.lq[b]; ++i)
          for (int64_t h = 0; h < cfg.hq; ++h)
            for (int64_t d = 0; d < cfg.dqk; ++d) c.q.set(c.q_off(b, i, h, d), pos(rng));
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t hk = 0; hk < cfg.hkv; ++hk)
          for (int64_t d = 0; d < cfg.dqk; ++d) {
            int64_t o;
            const_cast<Tensor&>(c.key_src(b, sc.j_big, hk, d, false, &o)).set(o, sc.mag);
            const_cast<Tensor&>(c.key_src(b, sc.j_inf, hk, d, false, &o)).set(o, -sc.mag);
          }
      if (sc.sink)  // 600: above every score by >= 216, so the final factor exp(m - 600) underflows
        for (int64_t h = 0; h < cfg.hq; ++h) c.sinks.set(h, 600.0f);
      for (int64_t d = 0; d < 2; ++d) {
        int64_t o;
        const_cast<Tensor&>(c.key_src(0, sc.j_inf, 0, d, true, &o)).set(o, d == 0 ? kInfF : -kInfF);
      }
      auto [ref, cpu] = run_both(c);
      const int64_t group = cfg.hq / cfg.hkv;
      for (const Case* r : {&ref, &cpu}) {
        int64_t wrong = 0;
        for (int64_t b = 0; b < r->B; ++b)
          for (int64_t i = 0; i < r->lq[b]; ++i)
            for (int64_t h = 0; h < cfg.hq; ++h)
              for (int64_t d = 0; d < cfg.dv; ++d) {
                const float x = r->out.get(r->out_off(b, i, h, d));
                const bool inf_row = b == 0 && h / group == 0 && d < 2;
                const bool ok = inf_row ? x == (d == 0 ? kInfF : -kInfF) : std::isfinite(x);
                if (!ok && wrong++ < 5)
                  ADD_FAILURE() << (r == &ref ? "reference" : "cpu") << ": out(b=" << b << ", i=" << i << ", h=" << h
                                << ", d=" << d << ") = " << x << ", expected "
                                << (inf_row ? (d == 0 ? "+inf" : "-inf") : "a finite value");
              }
        EXPECT_EQ(wrong, 0) << (r == &ref ? "reference" : "cpu") << " [" << cfg.describe() << "]";
      }
      EXPECT_TRUE(compare_runs(cpu, ref, tol_for(cfg.dtype)));
    }
}

// Fuzz finding new13 (tests/fuzz/corpus/new13_*): V near FLT_MAX. The unnormalized accumulator
// sum_j p_j v_j (p_j <= 1) reaches l * max|v| before the division by l = sum_j p_j, so two keys
// of weight ~1 with v = 3e38 overflowed it to +-inf (bf16, 6 keys of equal weight: out = inf,
// reference 3.004e38), on every path: the row-major decode kernels, the transposed and panel
// prefill kernels, split-KV partials (normalized, but computed from an overflowed sum). The exact
// output lies in the hull of V, so it is finite: cpu must give the reference's value within
// DESIGN §4's tolerance relative to max |V| (as the fuzzer's oracle scales it). V patterns: all
// -3e38; all FLT_MAX (the exact output is FLT_MAX itself; bf16: 3.3e38); random signs and magnitudes in
// [1e38, FLT_MAX] (large partial sums that cancel); 3e38 in half of the dims, small in the others.
TEST(EdgeCases, VNearFltMaxGivesAFiniteOutputAsTheReference) {
  struct Scenario {
    const char* name;
    int64_t sq, hq, hkv, sk;
    int32_t splits;
    bool causal;
  };
  const Scenario scenarios[] = {
      {"decode rows", 1, 8, 2, 40, 1, false},
      {"decode rows, many keys", 1, 4, 1, 600, 1, false},
      {"decode splits", 1, 4, 1, 600, 3, false},
      {"decode splits, GQA", 2, 8, 2, 300, 5, false},
      {"prefill, one tile", 16, 4, 2, 40, 1, false},
      {"prefill causal, several query tiles", 200, 2, 1, 260, 1, true},
      {"prefill panels", 128, 2, 1, 70, 1, false},
      {"prefill splits", 16, 2, 1, 600, 2, false},
      {"prefill causal splits", 40, 2, 1, 300, 3, true},
  };
  enum Pattern { all_neg, all_max, mixed, half_dims };
  const char* pattern_name[] = {"all -3e38", "all FLT_MAX", "mixed signs and magnitudes", "3e38 in half the dims"};
  int n = 0;
  for (DType dt : {DType::float32, DType::bfloat16})
    for (const Scenario& sc : scenarios)
      for (Pattern pat : {all_neg, all_max, mixed, half_dims}) {
        CaseConfig cfg;
        cfg.dtype = dt;
        cfg.batch = 2;
        cfg.sq = sc.sq;
        cfg.sk = sc.sk;
        cfg.hq = sc.hq;
        cfg.hkv = sc.hkv;
        cfg.dqk = cfg.dv = 32;
        cfg.causal = sc.causal;
        cfg.num_splits = sc.splits;
        const uint64_t seed = derive_seed(68000 + n++);
        FA4_SEED_TRACE(seed);
        SCOPED_TRACE(std::string(sc.name) + ", " + pattern_name[pat] + ", " + dtype_str(dt));
        Case c = make_case(cfg, seed);
        std::mt19937_64 rng(seed);
        // bf16 rounds values above ~3.39e38 to inf: its largest magnitudes stay below.
        const float top = dt == DType::bfloat16 ? 3.3e38f : std::numeric_limits<float>::max();
        std::uniform_real_distribution<float> mag(1e38f, top);
        for (int64_t b = 0; b < c.B; ++b)
          for (int64_t j = 0; j < c.lk[b]; ++j)
            for (int64_t hk = 0; hk < cfg.hkv; ++hk)
              for (int64_t d = 0; d < cfg.dv; ++d) {
                float x = 0.0f;
                switch (pat) {
                  case all_neg: x = -3e38f; break;
                  case all_max: x = top; break;
                  case mixed: x = (rng() & 1 ? 1.0f : -1.0f) * mag(rng); break;
                  case half_dims: x = d % 2 ? 3e38f : static_cast<float>(d) - 16.0f; break;
                }
                int64_t o;
                const_cast<Tensor&>(c.key_src(b, j, hk, d, true, &o)).set(o, x);
              }
        auto [ref, cpu] = run_both(c);
        double vmax = 0;
        for (int64_t b = 0; b < c.B; ++b)
          for (int64_t j = 0; j < c.lk[b]; ++j)
            for (int64_t hk = 0; hk < cfg.hkv; ++hk)
              for (int64_t d = 0; d < cfg.dv; ++d) {
                int64_t o;
                vmax = std::max(vmax, std::fabs(static_cast<double>(c.key_src(b, j, hk, d, true, &o).get(o))));
              }
        const Tol tol = tol_for(dt);
        int64_t wrong = 0, checked = 0;
        for (int64_t b = 0; b < c.B; ++b)
          for (int64_t i = 0; i < c.lq[b]; ++i)
            for (int64_t h = 0; h < cfg.hq; ++h) {
              for (int64_t d = 0; d < cfg.dv; ++d) {
                const int64_t o = c.out_off(b, i, h, d);
                const double r = ref.out.get(o), x = cpu.out.get(o);
                ASSERT_TRUE(std::isfinite(r)) << "the reference is finite on finite V";
                ++checked;
                const bool ok = std::isfinite(x) && std::fabs(x - r) <= tol.max_abs * vmax;
                if (!ok && wrong++ < 5)
                  ADD_FAILURE() << "cpu: out(b=" << b << ", i=" << i << ", h=" << h << ", d=" << d << ") = " << x
                                << ", reference " << r;
              }
              const int64_t lo = c.lse_off(b, h, i);  // V does not enter the lse
              const float rl = ref.lse.get(lo), cl = cpu.lse.get(lo);
              if (std::isfinite(rl)) EXPECT_NEAR(cl, rl, tol.lse_abs);
              else EXPECT_EQ(cl, rl);
            }
        EXPECT_EQ(wrong, 0) << "[" << cfg.describe() << "]";
        EXPECT_GT(checked, 0);
      }
}

TEST(EdgeCases, InfinityInOneQueryRowStaysInThatRow) {
  CaseConfig cfg = small_cfg();
  const uint64_t seed = derive_seed(67000);
  FA4_SEED_TRACE(seed);
  Case c = make_case(cfg, seed);
  c.q.set(c.q_off(0, 2, 1, 0), kInfF);
  // Key 0 with a positive q-dimension 0: its score is +inf, so the row is non-finite whatever the
  // other keys' signs (were every visible key's dimension 0 negative, all scores would be -inf:
  // an empty row of zeros, 1 seed in 2^9 -- a flaky case before).
  const int64_t hk = 1 / (cfg.hq / cfg.hkv);
  int64_t koff = 0;
  const Tensor& kt = c.key_src(0, 0, hk, 0, /*value=*/false, &koff);
  const_cast<Tensor&>(kt).set(koff, 1.0f);
  auto [ref, cpu] = run_both(c);
  auto bad = [](int64_t b, int64_t i, int64_t h) { return b == 0 && i == 2 && h == 1; };
  expect_nonfinite_rows_exactly(ref, bad, "reference");
  expect_nonfinite_rows_exactly(cpu, bad, "cpu");
}

TEST(EdgeCases, KeysBeyondTheLengthsAreNeverRead) {
  // make_case fills every key row beyond the lengths (cache tails, unused pages, seqused tails,
  // varlen slack) with NaN: outputs must be finite.
  int n = 0;
  for (KvMode kv : {KvMode::dense, KvMode::varlen, KvMode::cache, KvMode::paged})
    for (int32_t splits : {1, 3, 0})
      for (int64_t snew : {0, 2}) {
        if (snew && (kv == KvMode::dense || kv == KvMode::varlen)) continue;
        CaseConfig cfg = small_cfg();
        cfg.kv = kv;
        cfg.seqused_k = kv == KvMode::dense || kv == KvMode::varlen;
        cfg.snew = snew;
        cfg.sq = snew ? snew : 5;
        cfg.sk = 100;
        cfg.page_size = 16;
        cfg.num_splits = splits;
        cfg.lens_k = {0, 17, 63};
        if (kv == KvMode::varlen) cfg.lens_k = {30, 40, 90};  // slots; used is random below them
        ASSERT_TRUE(cfg.nan_unused);
        const uint64_t seed = derive_seed(68000 + n++);
        FA4_SEED_TRACE(seed);
        auto [ref, cpu] = run_both(make_case(cfg, seed));
        expect_nonfinite_rows_exactly(cpu, [](int64_t, int64_t, int64_t) { return false; }, "cpu");
        expect_nonfinite_rows_exactly(ref, [](int64_t, int64_t, int64_t) { return false; }, "reference");
        EXPECT_TRUE(compare_runs(cpu, ref, tol_for(cfg.dtype)));
      }
}

TEST(EdgeCases, PaddingBetweenRowsIsNeverReadNorWritten) {
  // Padded / strided layouts: the gaps of q, k, v are NaN, those of out/lse are poison; compare_runs
  // checks the output gaps are untouched.
  int n = 0;
  for (Layout L : {Layout::padded, Layout::strided_last, Layout::bhsd})
    for (DType dt : {DType::float32, DType::bfloat16, DType::float8_e4m3}) {
      CaseConfig cfg = small_cfg();
      cfg.layout = L;
      cfg.dtype = dt;
      cfg.causal = n % 2;
      const uint64_t seed = derive_seed(69000 + n++);
      FA4_SEED_TRACE(seed);
      auto [ref, cpu] = run_both(make_case(cfg, seed));
      expect_nonfinite_rows_exactly(cpu, [](int64_t, int64_t, int64_t) { return false; }, "cpu");
      EXPECT_TRUE(compare_runs(cpu, ref, tol_for(cfg.dtype)));
    }
}

// ---------------------------------------------------------------- strides
TEST(EdgeCases, BhsdViewsEqualBshdCopies) {
  const int64_t B = 2, S = 37, H = 4, D = 24;
  for (Backend be : {Backend::reference, Backend::cpu}) {
    const uint64_t seed = derive_seed(70000);
    FA4_SEED_TRACE(seed);
    std::mt19937_64 rng(seed);
    // BHSD buffers
    std::vector<float> qh(B * H * S * D), kh(B * H * S * D), vh(B * H * S * D), oh(B * H * S * D, kNaN);
    for (auto* x : {&qh, &kh, &vh})
      for (auto& e : *x) e = sample(Dist::normal, rng);
    // BSHD copies
    std::vector<float> qs(qh.size()), ks(qh.size()), vs(qh.size()), os(qh.size(), kNaN);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t d = 0; d < D; ++d) {
            const int64_t src = ((b * H + h) * S + s) * D + d, dst = ((b * S + s) * H + h) * D + d;
            qs[dst] = qh[src];
            ks[dst] = kh[src];
            vs[dst] = vh[src];
          }
    auto bhsd = [&](float* p) {
      TensorView t = TensorView::contiguous(p, DType::float32, {B, S, H, D});
      t.stride[0] = H * S * D;
      t.stride[1] = D;
      t.stride[2] = S * D;
      t.stride[3] = 1;
      return t;
    };
    AttentionParams a, c;
    a.q = bhsd(qh.data());
    a.k = bhsd(kh.data());
    a.v = bhsd(vh.data());
    a.out = bhsd(oh.data());
    c.q = TensorView::contiguous(qs.data(), DType::float32, {B, S, H, D});
    c.k = TensorView::contiguous(ks.data(), DType::float32, {B, S, H, D});
    c.v = TensorView::contiguous(vs.data(), DType::float32, {B, S, H, D});
    c.out = TensorView::contiguous(os.data(), DType::float32, {B, S, H, D});
    a.causal = c.causal = true;
    a.backend = c.backend = be;
    ASSERT_TRUE(fa4::attention_forward(a).ok());
    ASSERT_TRUE(fa4::attention_forward(c).ok());
    double max_err = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t d = 0; d < D; ++d) {
            const float x = oh[((b * H + h) * S + s) * D + d], y = os[((b * S + s) * H + h) * D + d];
            ASSERT_TRUE(std::isfinite(x) && std::isfinite(y));
            max_err = std::max(max_err, static_cast<double>(std::fabs(x - y)));
          }
    EXPECT_LE(max_err, 1e-6) << fa4::backend_name(be);
  }
}

// ---------------------------------------------------------------- 64-bit offsets
// Views whose elements lie far beyond 2^31 (and 2^32) elements; the pointers are never
// dereferenced: only core::normalize runs, and the Problem's offsets are checked.
void* fake(uintptr_t x) { return reinterpret_cast<void*>(x); }

TEST(EdgeCases, DenseOffsetsBeyond2To31AreComputedIn64Bits) {
  const int64_t G = int64_t{1} << 33;
  AttentionParams p;
  p.q = TensorView::contiguous(fake(0x1000), DType::float16, {3, 4, 2, 8});
  p.q.stride[0] = G;
  p.q.stride[1] = int64_t{1} << 31;
  p.q.stride[2] = 8;
  p.k = TensorView::contiguous(fake(0x2000), DType::float16, {3, 5, 1, 8});
  p.k.stride[0] = 3 * G;
  p.k.stride[1] = int64_t{1} << 32;
  p.v = p.k;
  p.v.data = fake(0x3000);
  p.v.stride[2] = int64_t{1} << 34;  // unusual but valid
  p.out = p.q;
  p.out.data = fake(0x4000);
  p.out.stride[0] = 5 * G;
  p.lse = TensorView::contiguous(fake(0x5000), DType::float32, {3, 2, 4});
  p.lse.stride[0] = 7 * G;
  p.lse.stride[1] = int64_t{1} << 32;
  p.lse.stride[2] = int64_t{1} << 30;  // 4 rows x 2^30 stay below the head stride: no overlap
  fa4::core::Problem pb;
  const Status st = fa4::core::normalize(p, &pb);
  ASSERT_TRUE(st.ok()) << st.message;
  EXPECT_EQ(pb.q_offset(2, 3, 1), 2 * G + 3 * (int64_t{1} << 31) + 8);
  EXPECT_EQ(pb.out_offset(2, 3, 1), 2 * 5 * G + 3 * (int64_t{1} << 31) + 8);
  EXPECT_EQ(pb.k_offset(2, 4, 0), 2 * 3 * G + 4 * (int64_t{1} << 32));
  EXPECT_EQ(pb.v_offset(2, 4, 0), 2 * 3 * G + 4 * (int64_t{1} << 32));
  EXPECT_EQ(pb.lse_offset(2, 3, 1), 2 * 7 * G + (int64_t{1} << 32) + 3 * (int64_t{1} << 30));
}

TEST(EdgeCases, PagedAndCacheOffsetsBeyond2To31AreComputedIn64Bits) {
  const int64_t PS = int64_t{1} << 30;  // page stride in elements
  std::vector<int32_t> table = {1000, 7, 3, 999};  // [B=2, max_pages=2]
  std::vector<int32_t> seqlens = {5, 8};
  AttentionParams p;
  p.q = TensorView::contiguous(fake(0x1000), DType::bfloat16, {2, 1, 4, 64});
  p.out = TensorView::contiguous(fake(0x2000), DType::bfloat16, {2, 1, 4, 64});
  p.k = TensorView::contiguous(fake(0x3000), DType::bfloat16, {1001, 4, 2, 64});
  p.k.stride[0] = PS;
  p.v = p.k;
  p.v.data = fake(0x4000);
  p.page_table = TensorView::contiguous(table.data(), DType::int32, {2, 2});
  p.cache_seqlens = TensorView::contiguous(seqlens.data(), DType::int32, {2});
  fa4::core::Problem pb;
  Status st = fa4::core::normalize(p, &pb);
  ASSERT_TRUE(st.ok()) << st.message;
  EXPECT_EQ(pb.kv, fa4::core::KvLayout::paged);
  // key 2 of sequence 0: page table[0][0] = 1000, row 2; key 7 of sequence 1: table[1][1] = 999, row 3
  EXPECT_EQ(pb.k_offset(0, 2, 1), 1000 * PS + 2 * 128 + 64);
  EXPECT_EQ(pb.k_offset(1, 7, 0), 999 * PS + 3 * 128);
  EXPECT_EQ(pb.v_offset(1, 4, 1), 999 * PS + 0 * 128 + 64);  // key 4 -> page index 1, row 0

  // Contiguous cache with cache_batch_idx and a batch stride of 2^36 elements.
  std::vector<int32_t> bidx = {6, 2};
  AttentionParams c;
  c.q = p.q;
  c.out = p.out;
  c.k = TensorView::contiguous(fake(0x3000), DType::bfloat16, {7, 10, 2, 64});
  c.k.stride[0] = int64_t{1} << 36;
  c.v = c.k;
  c.v.data = fake(0x4000);
  c.cache_seqlens = p.cache_seqlens;
  c.cache_batch_idx = TensorView::contiguous(bidx.data(), DType::int32, {2});
  st = fa4::core::normalize(c, &pb);
  ASSERT_TRUE(st.ok()) << st.message;
  EXPECT_EQ(pb.k_offset(0, 4, 1), 6 * (int64_t{1} << 36) + 4 * 128 + 64);
  EXPECT_EQ(pb.v_offset(1, 7, 0), 2 * (int64_t{1} << 36) + 7 * 128);
}

TEST(EdgeCases, VarlenTokenOffsetsBeyond2To31AreComputedIn64Bits) {
  const int64_t T = (int64_t{1} << 30) + 8;
  std::vector<int32_t> cuq = {0, 1 << 30, (1 << 30) + 3};
  std::vector<int32_t> cuk = {0, 5, (1 << 30) + 1};
  AttentionParams p;
  p.q = TensorView::contiguous(fake(0x1000), DType::float16, {T, 2, 128});
  p.q.stride[0] = 4096;  // token stride: offsets up to 2^42
  p.out = p.q;
  p.out.data = fake(0x2000);
  p.k = TensorView::contiguous(fake(0x3000), DType::float16, {T, 1, 128});
  p.k.stride[0] = 8192;
  p.v = p.k;
  p.v.data = fake(0x4000);
  p.lse = TensorView::contiguous(fake(0x5000), DType::float32, {2, T});
  p.lse.stride[0] = int64_t{1} << 33;
  p.cu_seqlens_q = TensorView::contiguous(cuq.data(), DType::int32, {3});
  p.cu_seqlens_k = TensorView::contiguous(cuk.data(), DType::int32, {3});
  fa4::core::Problem pb;
  const Status st = fa4::core::normalize(p, &pb);
  ASSERT_TRUE(st.ok()) << st.message;
  ASSERT_EQ(pb.seqlen_q.size(), 2u);
  EXPECT_EQ(pb.seqlen_q[0], int64_t{1} << 30);
  EXPECT_EQ(pb.seqlen_q[1], 3);
  EXPECT_EQ(pb.seqlen_k[1], (int64_t{1} << 30) + 1 - 5);
  EXPECT_EQ(pb.max_sq, int64_t{1} << 30);
  EXPECT_EQ(pb.q_offset(1, 2, 1), ((int64_t{1} << 30) + 2) * 4096 + 128);
  EXPECT_EQ(pb.out_offset(0, (1 << 30) - 1, 0), ((int64_t{1} << 30) - 1) * 4096);
  EXPECT_EQ(pb.k_offset(1, (1 << 30) - 4, 0), ((int64_t{1} << 30) + 1) * 8192);
  EXPECT_EQ(pb.lse_offset(1, 2, 1), (int64_t{1} << 33) + (int64_t{1} << 30) + 2);
}

TEST(EdgeCases, ShapesWhoseByteExtentOverflowsInt64AreRejected) {
  AttentionParams p;
  // Sq = 2^58 rows of 8 fp32: 2^61 elements = 2^63 bytes, one past the largest int64.
  p.q = TensorView::contiguous(fake(0x1000), DType::float32, {1, 1, 1, 8});
  p.q.shape[1] = int64_t{1} << 58;
  p.k = TensorView::contiguous(fake(0x2000), DType::float32, {1, 4, 1, 8});
  p.v = p.k;
  p.out = p.q;
  p.out.data = fake(0x3000);
  fa4::core::Problem pb;
  Status st = fa4::core::normalize(p, &pb);
  EXPECT_EQ(st.code, StatusCode::invalid_argument);
  EXPECT_EQ(st.argument, "q") << st.message;
  // 2^57 rows: q fits (2^62 bytes); an out with a row stride of 17 elements does not.
  p.q.shape[1] = int64_t{1} << 57;
  p.out.shape[1] = p.q.shape[1];
  p.out.stride[1] = 17;
  st = fa4::core::normalize(p, &pb);
  EXPECT_EQ(st.code, StatusCode::invalid_argument);
  EXPECT_EQ(st.argument, "out") << st.message;
  // With byte extents that fit, the length itself must still fit int32 (lengths are int32 in
  // every index tensor).
  p.out.stride[1] = 8;
  st = fa4::core::normalize(p, &pb);
  EXPECT_EQ(st.code, StatusCode::invalid_argument);
  EXPECT_EQ(st.argument, "q") << st.message;
  // The longest allowed sequence with a 2^20-element row stride: offsets near 2^51.
  const int64_t len = std::numeric_limits<int32_t>::max();
  p.q.shape[1] = p.out.shape[1] = len;
  p.q.stride[1] = p.out.stride[1] = int64_t{1} << 20;
  st = fa4::core::normalize(p, &pb);
  EXPECT_TRUE(st.ok()) << st.message;
  EXPECT_EQ(pb.out_offset(0, len - 1, 0), (len - 1) * (int64_t{1} << 20));
}

TEST(EdgeCases, KeyLengthsBeyondInt32AreRejected) {
  AttentionParams p;
  p.q = TensorView::contiguous(fake(0x1000), DType::float32, {1, 1, 1, 8});
  p.k = TensorView::contiguous(fake(0x2000), DType::float32, {1, 4, 1, 8});
  p.k.shape[1] = int64_t{1} << 31;
  p.k.stride[1] = 0;  // a broadcast view: no memory behind it, still not a valid length
  p.v = p.k;
  p.out = p.q;
  p.out.data = fake(0x3000);
  fa4::core::Problem pb;
  Status st = fa4::core::normalize(p, &pb);
  EXPECT_EQ(st.code, StatusCode::invalid_argument);
  EXPECT_EQ(st.argument, "k") << st.message;
  // Paged: the capacity max_pages * page_size bounds the walk over page-table entries.
  p.k = TensorView::contiguous(fake(0x2000), DType::float32, {4, 16, 1, 8});
  p.v = p.k;
  int32_t pt = 0;
  p.page_table = TensorView::contiguous(&pt, DType::int32, {1, 1});
  p.page_table.shape[1] = int64_t{1} << 40;
  p.page_table.stride[1] = 0;
  st = fa4::core::normalize(p, &pb);
  EXPECT_EQ(st.code, StatusCode::invalid_argument);
  EXPECT_EQ(st.argument, "page_table") << st.message;
}

// An empty tensor's strides address nothing, so validation leaves them unbounded (any value is
// legal). The backends must not form offsets from them: the CI fuzzer found the cpu backend's
// V row offset of kv head 2 at 2 * 2^62 (signed overflow) for a [B, 0, Hkv, D] v. Under the
// sanitizer build this fails on such arithmetic; in every build the rows without keys are 0.
TEST(EdgeCases, EmptyKeysWithHugeStridesGiveZeroRows) {
  constexpr int64_t kHuge = int64_t{1} << 62;
  std::vector<float> q(2 * 3 * 6 * 2, 1.0f), out(q.size()), lse(2 * 6 * 3);
  for (const bool paged : {false, true})
    for (const Backend be : {Backend::reference, Backend::cpu}) {
      AttentionParams p;
      p.q = TensorView::contiguous(q.data(), DType::float32, {2, 3, 6, 2});  // [B, Sq, Hq, D]
      p.out = TensorView::contiguous(out.data(), DType::float32, {2, 3, 6, 2});
      p.lse = TensorView::contiguous(lse.data(), DType::float32, {2, 6, 3});  // [B, Hq, Sq]
      int32_t table = 0;
      if (paged) {
        // [pages, page_size, Hkv, D] with real rows; a [B, 0] page table: no key is reachable.
        p.k = TensorView::contiguous(fake(0x2000), DType::float32, {4, 16, 3, 2});
        p.page_table = TensorView::contiguous(&table, DType::int32, {2, 0});
        p.page_table.stride[0] = kHuge;
      } else {
        p.k = TensorView::contiguous(fake(0x2000), DType::float32, {2, 0, 3, 2});  // [B, 0, Hkv, D]
        p.k.stride[0] = p.k.stride[2] = kHuge;
      }
      p.v = p.k;
      p.v.data = fake(0x3000);
      p.backend = be;
      std::fill(out.begin(), out.end(), kNaN);
      std::fill(lse.begin(), lse.end(), kNaN);
      const Status st = fa4::attention_forward(p);
      ASSERT_TRUE(st.ok()) << backend_name(be) << (paged ? " paged: " : ": ") << st.message;
      for (float x : out) ASSERT_EQ(x, 0.0f) << backend_name(be) << (paged ? " paged" : "");
      for (float x : lse) ASSERT_EQ(x, -kInfF) << backend_name(be) << (paged ? " paged" : "");
      fa4::PlanInfo plan;
      EXPECT_TRUE(fa4::describe_plan(p, &plan).ok());
    }
}

// Varlen token tensors: cu_seqlens (int32) address fewer than 2^31 tokens, so a longer q / k (a
// broadcast view costs no memory) is refused as dense lengths beyond int32 are.
TEST(EdgeCases, VarlenTokenCountsBeyondInt32AreRejected) {
  std::vector<int32_t> cu = {0, 3, 7};
  for (const bool on_k : {false, true}) {
    AttentionParams p;
    p.q = TensorView::contiguous(fake(0x1000), DType::float16, {8, 2, 64});
    p.out = p.q;
    p.out.data = fake(0x2000);
    p.k = TensorView::contiguous(fake(0x3000), DType::float16, {8, 2, 64});
    p.v = p.k;
    p.v.data = fake(0x4000);
    p.cu_seqlens_q = TensorView::contiguous(cu.data(), DType::int32, {3});
    p.cu_seqlens_k = p.cu_seqlens_q;
    fa4::core::Problem pb;
    ASSERT_TRUE(fa4::core::normalize(p, &pb).ok());
    TensorView& t = on_k ? p.k : p.q;
    t.shape[0] = int64_t{1} << 31;
    t.stride[0] = t.stride[1] = 0;  // broadcast: the extent fits
    if (!on_k) p.out.shape[0] = t.shape[0];  // (contiguous: 2^39 bytes)
    if (on_k) p.v.shape[0] = t.shape[0], p.v.stride[0] = p.v.stride[1] = 0;
    const Status st = fa4::core::normalize(p, &pb);
    EXPECT_EQ(st.code, StatusCode::invalid_argument);
    EXPECT_EQ(st.argument, on_k ? "k" : "q") << st.message;
  }
}

// Sequences and heads are int32-indexed: 2^31 of either is refused, even as an empty problem of
// broadcast views (the cuda planner's batch x Sq overflowed for a [2^62, 64, 0, 8] q).
TEST(EdgeCases, BatchAndHeadCountsBeyondInt32AreRejected) {
  const int64_t big = int64_t{1} << 31;
  for (int which = 0; which < 3; ++which) {
    AttentionParams p;
    p.q = TensorView::contiguous(fake(0x1000), DType::float16, {2, 3, 4, 64});
    p.k = TensorView::contiguous(fake(0x3000), DType::float16, {2, 5, 4, 64});
    p.v = p.k;
    p.v.data = fake(0x4000);
    p.out = p.q;
    p.out.data = fake(0x2000);
    fa4::core::Problem pb;
    ASSERT_TRUE(fa4::core::normalize(p, &pb).ok());
    std::vector<int32_t> cu(4, 0);
    const char* named = "q";
    if (which == 0) {  // dense batch, empty (no heads): no extent bounds it
      for (TensorView* t : {&p.q, &p.out, &p.k, &p.v}) t->shape[0] = big, t->shape[2] = 0;
    } else if (which == 1) {  // heads, B = 1, one row each: broadcast q, a 2^31 x 64 out
      p.q.shape[0] = p.out.shape[0] = p.k.shape[0] = p.v.shape[0] = 1;
      p.q.shape[1] = p.out.shape[1] = 1;
      p.q.shape[2] = p.out.shape[2] = big;
      p.q.stride[0] = p.q.stride[1] = p.q.stride[2] = 0;
      p.out.stride[0] = p.out.stride[1] = big * 64, p.out.stride[2] = 64;
      p.k.shape[2] = p.v.shape[2] = 1;
      p.k.stride[2] = p.v.stride[2] = 0;
    } else {  // varlen: a broadcast cu_seqlens_q of 2^31 + 1 entries on the GPU (not read here)
      for (TensorView* t : {&p.q, &p.out, &p.k, &p.v}) t->device = fa4::DeviceType::cuda;
      p.q = TensorView::contiguous(fake(0x1000), DType::float16, {6, 4, 64}, fa4::DeviceType::cuda);
      p.out = TensorView::contiguous(fake(0x2000), DType::float16, {6, 4, 64}, fa4::DeviceType::cuda);
      p.cu_seqlens_q = TensorView::contiguous(fake(0x5000), DType::int32, {big + 1}, fa4::DeviceType::cuda);
      p.cu_seqlens_q.stride[0] = 0;
      p.k.shape[0] = p.v.shape[0] = big;
      p.k.stride[0] = p.v.stride[0] = 0;
      named = "cu_seqlens_q";
    }
    const Status st = fa4::core::normalize(p, &pb);
    EXPECT_EQ(st.code, StatusCode::invalid_argument) << which;
    EXPECT_EQ(st.argument, named) << which << ": " << st.message;
  }
}

}  // namespace
}  // namespace fa4test
