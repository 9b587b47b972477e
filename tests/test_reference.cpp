// The oracle itself: backend=reference against an independent, deliberately naive fp64
// implementation written in the tests (test_util.cpp: own addressing of every layout, own mask
// formula), and hand-computed tiny cases of the exact semantics (run on the cpu backend too).
#include <algorithm>
#include <bitset>
#include <cmath>
#include <limits>
#include <sstream>

#include <omp.h>

#include "test_util.h"
#include "tiny.h"

namespace fa4test {
namespace {

// Only the rounding of the output dtype separates the reference (fp64) from the naive oracle.
// The reference evaluates in fp64, rounds once to fp32 and then (store) to the output dtype, so
// each output element may differ from the oracle by half an fp32 ulp plus half an output ulp *at
// that element's magnitude*: a relative bound, checked per element by within_output_rounding().
// A fixed absolute max error cannot express it: bf16 outputs reach |O| >= 16 (outlier inputs, few
// keys, a dominant weight on a large v), where half a bf16 ulp is 0.0625 (fp16: 0.0078): the old
// absolute bounds (bf16 0.032, fp16 0.004) failed correctly rounded outputs in about 1 run in 80
// (e.g. oracle 16.4348, bf16 16.375), while being far looser than the rounding near |O| ~ 1.
// The aggregate rel_l2 / cosine bounds below are implied by the per-element one for normal
// values (relative half ulp: fp32 2^-24, fp16 2^-11, bf16 2^-8) and stay as a second opinion.
Tol rounding_tol(DType in) {
  constexpr double kNoAbs = std::numeric_limits<double>::infinity();  // per element instead
  switch (in) {
    case DType::float32: return {1e-6, kNoAbs, 0.0, 1e-4};
    case DType::float16: return {1e-3, kNoAbs, 0.0, 1e-4};
    case DType::bfloat16: return {8e-3, kNoAbs, 0.0, 1e-4};
    default: return {8e-3, kNoAbs, 0.99999, 1e-4};  // fp8 inputs: bf16 outputs
  }
}

// Every finite output element within the reference's two roundings of the oracle's value r:
//   |out - r| <= ulp_f32(r) / 2 + ulp_out(r) / 2 + slack.
// (Round-to-nearest moves a value by at most half the spacing of its own binade; if the fp32
// step lands on the next power of two, the second rounding is exact.) `slack` covers fp64
// evaluation-order differences (descale placement, summation order): about
// (n_keys + Dqk) * 2^-53 * |scores| * max|v| < 1e-11 at these sizes, so 1e-9 is far below any
// rounding bound that matters yet keeps near-zero outputs (cancellation) from flaking.
// Non-finite, unwritten and empty-row elements are judged by compare_expected.
::testing::AssertionResult within_output_rounding(const Case& c, const Expected& e) {
  constexpr double kSlack = 1e-9;
  const DType odt = c.out.dtype;
  const int64_t hq = c.cfg.hq, dv = c.cfg.dv;
  int64_t bad = 0;
  std::ostringstream first;
  first.precision(9);
  for (size_t t = 0; t < e.row_b.size(); ++t)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t d = 0; d < dv; ++d) {
        const int64_t o = c.out_off(e.row_b[t], e.row_i[t], h, d);
        const double r = e.out[(t * hq + h) * dv + d], x = c.out.get(o);
        if (c.out.is_poison(o) || !std::isfinite(r) || !std::isfinite(x)) continue;
        const double bound =
            0.5 * ulp_of(DType::float32, r) + (odt == DType::float32 ? 0.0 : 0.5 * ulp_of(odt, r)) + kSlack;
        if (std::fabs(x - r) > bound && bad++ < 5)
          first << "\n    out(b=" << e.row_b[t] << ", i=" << e.row_i[t] << ", h=" << h << ", d=" << d
                << ") = " << x << ", oracle " << r << ": |err| " << std::fabs(x - r) << " > bound " << bound;
      }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "[" << c.cfg.describe() << "] " << bad << " " << dtype_str(odt)
                                       << " output element(s) beyond the output rounding of the fp64 oracle"
                                       << first.str();
}

// compare_expected (structure, empty rows, non-finite patterns, lse, aggregate error) plus the
// per-element rounding bound.
void expect_matches_oracle(const Case& c, const Expected& e) {
  EXPECT_TRUE(compare_expected(c, e, rounding_tol(c.cfg.dtype)));
  EXPECT_TRUE(within_output_rounding(c, e));
}

TEST(ReferenceVsNaive, RandomConfigurationsOfEveryLayout) {
  for (int i = 0; i < 250; ++i) {
    const uint64_t seed = derive_seed(50000 + i);
    FA4_SEED_TRACE(seed);  // base seed (FA4_TEST_SEED) and case seed on every failure
    std::mt19937_64 rng(seed);
    const CaseConfig cfg = random_config(rng);
    SCOPED_TRACE(cfg.describe());
    Case c = make_case(cfg, seed);
    const Status st = c.run(Backend::reference);
    ASSERT_TRUE(st.ok()) << st.message;
    expect_matches_oracle(c, naive_attention(c));
  }
}

// The reference runs its (batch, head) pairs on OpenMP's threads: one thread and many give the
// same bits (each row's sums in one order), on random configurations of every layout.
TEST(ReferenceVsNaive, ThreadCountDoesNotChangeTheBits) {
  const int threads = omp_get_max_threads();
  for (int i = 0; i < 40; ++i) {
    const uint64_t seed = derive_seed(50500 + i);
    FA4_SEED_TRACE(seed);
    std::mt19937_64 rng(seed);
    CaseConfig cfg = random_config(rng);
    cfg.batch = std::max<int64_t>(cfg.batch, 2);
    SCOPED_TRACE(cfg.describe());
    Case one = make_case(cfg, seed), many = make_case(cfg, seed);
    omp_set_num_threads(1);
    const Status s1 = one.run(Backend::reference);
    omp_set_num_threads(std::max(threads, 4));
    const Status s2 = many.run(Backend::reference);
    omp_set_num_threads(threads);
    ASSERT_TRUE(s1.ok() && s2.ok()) << s1.message << s2.message;
    EXPECT_TRUE(bitwise_equal(one, many));
  }
}

TEST(ReferenceVsNaive, AppendWritesTheNewRowsAtCacheSeqlensAndNothingElse) {
  for (KvMode kv : {KvMode::cache, KvMode::paged})
    for (int rep = 0; rep < 4; ++rep) {
      CaseConfig cfg;
      cfg.kv = kv;
      cfg.batch = 3;
      cfg.hq = 4;
      cfg.hkv = 2;
      cfg.dqk = 8;
      cfg.dv = 6;
      cfg.snew = 3;
      cfg.sq = 3;
      cfg.sk = 20;
      cfg.page_size = 3;
      cfg.cache_batch_idx = kv == KvMode::cache;
      cfg.layout = rep % 2 ? Layout::padded : Layout::contiguous;
      const uint64_t seed = derive_seed(51000 + rep + 10 * static_cast<int>(kv));
      FA4_SEED_TRACE(seed);
      const Case before = make_case(cfg, seed);
      Case c = before;
      ASSERT_TRUE(c.run(Backend::reference).ok());
      // Expected cache: the old one with rows base_k[b] + t replaced by k_new[b, t].
      Tensor ek = before.k, ev = before.v;
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t t = 0; t < cfg.snew; ++t)
          for (int64_t h = 0; h < cfg.hkv; ++h) {
            for (int64_t d = 0; d < cfg.dqk; ++d)
              std::memcpy(&ek.mem[c.cache_off(ek, b, c.base_k[b] + t, h, d) * ek.esize()],
                          &before.k_new.mem[before.k_new.off({b, t, h, d}) * ek.esize()], ek.esize());
            for (int64_t d = 0; d < cfg.dv; ++d)
              std::memcpy(&ev.mem[c.cache_off(ev, b, c.base_k[b] + t, h, d) * ev.esize()],
                          &before.v_new.mem[before.v_new.off({b, t, h, d}) * ev.esize()], ev.esize());
          }
      EXPECT_TRUE(c.k.mem == ek.mem) << "k cache after append";
      EXPECT_TRUE(c.v.mem == ev.mem) << "v cache after append";
      EXPECT_TRUE(c.k_new.mem == before.k_new.mem && c.v_new.mem == before.v_new.mem) << "k_new/v_new modified";
      expect_matches_oracle(c, naive_attention(before));
    }
}

// ---------------------------------------------------------------- hand-computed semantics
class Semantics : public ::testing::TestWithParam<Backend> {};

// Visible key set of every row, decoded from the output: scores all 0 (q = 0) so the weights are
// uniform, v_j = 2^j, hence lse = log(count) and O * count = sum of 2^j over the visible j.
std::vector<std::string> visible_sets(Backend be, int64_t sq, int64_t sk, bool causal, int64_t wl, int64_t wr,
                                      int64_t chunk) {
  Tiny t(1, sq, sk, 1, 1, 1);
  for (int64_t j = 0; j < sk; ++j) t.V(0, j, 0, 0) = static_cast<float>(1 << j);
  t.p.causal = causal;
  t.p.window_left = wl;
  t.p.window_right = wr;
  t.p.chunk_size = chunk;
  const Status st = t.run(be);
  EXPECT_TRUE(st.ok()) << st.message;
  std::vector<std::string> rows;
  for (int64_t i = 0; i < sq; ++i) {
    std::string r(static_cast<size_t>(sk), '0');
    const float o = t.O(0, i, 0, 0), l = t.L(0, 0, i);
    if (l == kNegInfF) {
      EXPECT_EQ(o, 0.0f) << "empty row " << i << " must have O exactly 0";
    } else {
      const long count = std::lround(std::exp(static_cast<double>(l)));
      const long sum = std::lround(static_cast<double>(o) * static_cast<double>(count));
      EXPECT_NEAR(std::exp(static_cast<double>(l)), static_cast<double>(count), 1e-3);
      for (int64_t j = 0; j < sk; ++j)
        if (sum & (1L << j)) r[static_cast<size_t>(j)] = '1';
    }
    rows.push_back(r);
  }
  return rows;
}

using Rows = std::vector<std::string>;

TEST_P(Semantics, CausalIsBottomRightAligned) {
  EXPECT_EQ(visible_sets(GetParam(), 3, 5, true, -1, -1, 0), (Rows{"11100", "11110", "11111"}));
  EXPECT_EQ(visible_sets(GetParam(), 3, 3, true, -1, -1, 0), (Rows{"100", "110", "111"}));
}

TEST_P(Semantics, CausalWithMoreQueriesThanKeysHasEmptyFirstRows) {
  EXPECT_EQ(visible_sets(GetParam(), 5, 3, true, -1, -1, 0), (Rows{"000", "000", "100", "110", "111"}));
  EXPECT_EQ(visible_sets(GetParam(), 4, 2, false, 1, 0, 0), (Rows{"00", "00", "10", "11"}));
}

TEST_P(Semantics, NoMaskSeesEveryKey) {
  EXPECT_EQ(visible_sets(GetParam(), 2, 3, false, -1, -1, 0), (Rows{"111", "111"}));
}

TEST_P(Semantics, SlidingWindows) {
  EXPECT_EQ(visible_sets(GetParam(), 4, 4, false, 1, 0, 0), (Rows{"1000", "1100", "0110", "0011"}));
  EXPECT_EQ(visible_sets(GetParam(), 4, 6, false, 1, 1, 0), (Rows{"011100", "001110", "000111", "000011"}));
  EXPECT_EQ(visible_sets(GetParam(), 2, 5, false, 2, -1, 0), (Rows{"01111", "00111"}));
  EXPECT_EQ(visible_sets(GetParam(), 3, 3, false, -1, 1, 0), (Rows{"110", "111", "111"}));
  EXPECT_EQ(visible_sets(GetParam(), 3, 3, false, 0, 0, 0), (Rows{"100", "010", "001"}));
  EXPECT_EQ(visible_sets(GetParam(), 2, 4, false, 0, 2, 0), (Rows{"0011", "0001"}));
  EXPECT_EQ(visible_sets(GetParam(), 5, 5, true, 2, -1, 0), (Rows{"10000", "11000", "11100", "01110", "00111"}));
}

TEST_P(Semantics, ChunkedAttentionIsCausalWithinChunks) {
  EXPECT_EQ(visible_sets(GetParam(), 5, 5, false, -1, -1, 2), (Rows{"10000", "11000", "00100", "00110", "00001"}));
  EXPECT_EQ(visible_sets(GetParam(), 2, 5, false, -1, -1, 3), (Rows{"00010", "00011"}));
  EXPECT_EQ(visible_sets(GetParam(), 6, 6, false, 1, -1, 4),
            (Rows{"100000", "110000", "011000", "001100", "000010", "000011"}));
  EXPECT_EQ(visible_sets(GetParam(), 3, 1, false, -1, -1, 2), (Rows{"0", "0", "1"}));
}

TEST_P(Semantics, NoKeysMeansEveryRowIsEmpty) {
  Tiny t(2, 3, 0, 2, 1, 4);
  ASSERT_TRUE(t.run(GetParam()).ok());
  for (float o : t.out) EXPECT_EQ(o, 0.0f);
  for (float l : t.lse) EXPECT_EQ(l, kNegInfF);
}

TEST_P(Semantics, WeightsAreTheSoftmaxOfScaledScores) {
  Tiny t(1, 1, 2, 1, 1, 1);
  t.Q(0, 0, 0, 0) = 1.0f;
  t.K(0, 0, 0, 0) = 0.0f;
  t.K(0, 1, 0, 0) = std::log(3.0f);
  t.V(0, 0, 0, 0) = 1.0f;
  t.V(0, 1, 0, 0) = 5.0f;
  t.p.scale = 1.0f;
  ASSERT_TRUE(t.run(GetParam()).ok());
  EXPECT_NEAR(t.O(0, 0, 0, 0), 4.0f, 1e-5);  // (1 * 1 + 3 * 5) / 4
  EXPECT_NEAR(t.L(0, 0, 0), std::log(4.0f), 1e-6);
  t.p.scale = 2.0f;  // weights 1 and 9
  ASSERT_TRUE(t.run(GetParam()).ok());
  EXPECT_NEAR(t.O(0, 0, 0, 0), 46.0f / 10.0f, 1e-5);
  EXPECT_NEAR(t.L(0, 0, 0), std::log(10.0f), 1e-5);
}

TEST_P(Semantics, DefaultScaleIsOneOverSqrtDqk) {
  Tiny t(1, 1, 2, 1, 1, 4, 1);
  for (int d = 0; d < 4; ++d) {
    t.Q(0, 0, 0, d) = 1.0f;
    t.K(0, 0, 0, d) = 1.0f;  // dot 4, scaled 2
  }
  t.V(0, 0, 0, 0) = 1.0f;
  ASSERT_TRUE(t.run(GetParam()).ok());
  const double e2 = std::exp(2.0);
  EXPECT_NEAR(t.O(0, 0, 0, 0), e2 / (e2 + 1.0), 1e-6);
  EXPECT_NEAR(t.L(0, 0, 0), std::log(e2 + 1.0), 1e-6);
}

TEST_P(Semantics, SoftcapIsTanhOfTheScaledScore) {
  Tiny t(1, 1, 2, 1, 1, 1);
  t.Q(0, 0, 0, 0) = 2.0f;
  t.K(0, 0, 0, 0) = 4.0f;  // scaled score 0.5 * 8 = 4
  t.V(0, 0, 0, 0) = 1.0f;
  t.p.scale = 0.5f;
  t.p.softcap = 2.0f;
  ASSERT_TRUE(t.run(GetParam()).ok());
  const double s = 2.0 * std::tanh(4.0 / 2.0);
  EXPECT_NEAR(t.O(0, 0, 0, 0), std::exp(s) / (std::exp(s) + 1.0), 1e-6);
  EXPECT_NEAR(t.L(0, 0, 0), std::log(std::exp(s) + 1.0), 1e-6);
}

TEST_P(Semantics, SinkIsInTheDenominatorOnly) {
  Tiny t(1, 1, 1, 1, 1, 1);
  t.V(0, 0, 0, 0) = 2.0f;
  t.sinks = {0.0f};
  ASSERT_TRUE(t.run(GetParam()).ok());
  EXPECT_NEAR(t.O(0, 0, 0, 0), 1.0f, 1e-6);  // 2 * 1 / (1 + 1)
  EXPECT_NEAR(t.L(0, 0, 0), std::log(2.0f), 1e-6);
  t.sinks = {std::log(3.0f)};
  ASSERT_TRUE(t.run(GetParam()).ok());
  EXPECT_NEAR(t.O(0, 0, 0, 0), 0.5f, 1e-6);  // 2 * 1 / (3 + 1)
  EXPECT_NEAR(t.L(0, 0, 0), std::log(4.0f), 1e-6);
  t.sinks = {40.0f};  // sink dominates: O -> 0 but the row is not empty
  ASSERT_TRUE(t.run(GetParam()).ok());
  EXPECT_NEAR(t.O(0, 0, 0, 0), 2.0 * std::exp(-40.0), 1e-20);
  EXPECT_NEAR(t.L(0, 0, 0), 40.0f, 1e-5);
}

TEST_P(Semantics, RowWithOnlyTheSinkHasZeroOutputAndTheSinksLse) {
  Tiny t(1, 3, 1, 2, 1, 2);  // causal, Sq > Sk: rows 0 and 1 see no key
  t.p.causal = true;
  t.V(0, 0, 0, 0) = 3.0f;
  t.V(0, 0, 0, 1) = -1.0f;
  t.sinks = {0.7f, -2.0f};
  ASSERT_TRUE(t.run(GetParam()).ok());
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 2; ++i) {
      EXPECT_EQ(t.O(0, i, h, 0), 0.0f);
      EXPECT_EQ(t.O(0, i, h, 1), 0.0f);
      EXPECT_NEAR(t.L(0, h, i), t.sinks[static_cast<size_t>(h)], 1e-6);
    }
    // Row 2 sees key 0 (score 0): weight 1 against e^sink.
    const double w = 1.0 / (1.0 + std::exp(static_cast<double>(t.sinks[static_cast<size_t>(h)])));
    EXPECT_NEAR(t.O(0, 2, h, 0), 3.0 * w, 1e-6);
    EXPECT_NEAR(t.L(0, h, 2), std::log(1.0 + std::exp(static_cast<double>(t.sinks[static_cast<size_t>(h)]))), 1e-6);
  }
}

TEST_P(Semantics, EmptyRowsAreExactlyZeroWithLseMinusInfinity) {
  Tiny t(2, 4, 2, 2, 2, 3);
  std::mt19937_64 rng(derive_seed(52000));
  for (auto& x : t.q) x = sample(Dist::normal, rng);
  for (auto& x : t.k) x = sample(Dist::normal, rng);
  for (auto& x : t.v) x = sample(Dist::normal, rng);
  t.p.causal = true;
  ASSERT_TRUE(t.run(GetParam()).ok());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 4; ++i) {
        const bool empty = i < 2;  // off = -2
        for (int64_t d = 0; d < 3; ++d) {
          if (empty) EXPECT_EQ(t.O(b, i, h, d), 0.0f);
          else EXPECT_TRUE(std::isfinite(t.O(b, i, h, d)));
        }
        if (empty) EXPECT_EQ(t.L(b, h, i), kNegInfF);
        else EXPECT_TRUE(std::isfinite(t.L(b, h, i)));
      }
}

TEST_P(Semantics, QueryHeadReadsKvHeadHOverGroup) {
  for (int64_t hkv : {1, 2, 3}) {
    const int64_t hq = 6;
    Tiny t(1, 2, 3, hq, hkv, 4, 2);
    std::mt19937_64 rng(derive_seed(53000 + hkv));
    for (auto& x : t.q) x = sample(Dist::normal, rng);
    for (auto& x : t.k) x = sample(Dist::normal, rng);
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t h = 0; h < hkv; ++h) {
        t.V(0, j, h, 0) = static_cast<float>(10 * h + 1);  // constant per kv head: O = that constant
        t.V(0, j, h, 1) = static_cast<float>(j);
      }
    ASSERT_TRUE(t.run(GetParam()).ok());
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < 2; ++i) {
        const int64_t hk = h / (hq / hkv);
        EXPECT_NEAR(t.O(0, i, h, 0), 10.0 * hk + 1.0, 1e-4) << "hq=" << hq << " hkv=" << hkv << " h=" << h;
        // lse uses that kv head's keys too
        double den = 0;
        for (int64_t j = 0; j < 3; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < 4; ++d) dot += static_cast<double>(t.Q(0, i, h, d)) * t.K(0, j, hk, d);
          den += std::exp(dot / 2.0);
        }
        EXPECT_NEAR(t.L(0, h, i), std::log(den), 1e-5);
      }
  }
}

TEST_P(Semantics, Fp8DescalesMultiplyScoresAndValues) {
  // q = 1, k = (1, 0), v = (1, 3); descales q 2, k 1.5, v 2, scale 1: scores (3, 0), v (2, 6).
  const Backend be = GetParam();
  Tensor q = Tensor::make(DType::float8_e4m3, {1, 1, 1, 1});
  Tensor k = Tensor::make(DType::float8_e4m3, {1, 2, 1, 1});
  Tensor v = Tensor::make(DType::float8_e4m3, {1, 2, 1, 1});
  Tensor out = Tensor::make(DType::bfloat16, {1, 1, 1, 1});
  Tensor lse = Tensor::make(DType::float32, {1, 1, 1});
  Tensor dq = Tensor::make(DType::float32, {1, 1}), dk = dq, dv = dq;
  q.set(0, 1.0f);
  k.set(0, 1.0f);
  k.set(1, 0.0f);
  v.set(0, 1.0f);
  v.set(1, 3.0f);
  dq.set(0, 2.0f);
  dk.set(0, 1.5f);
  dv.set(0, 2.0f);
  AttentionParams p;
  p.q = q.view();
  p.k = k.view();
  p.v = v.view();
  p.out = out.view();
  p.lse = lse.view();
  p.q_descale = dq.view();
  p.k_descale = dk.view();
  p.v_descale = dv.view();
  p.scale = 1.0f;
  p.backend = be;
  const Status st = fa4::attention_forward(p);
  ASSERT_TRUE(st.ok()) << st.message;
  const double e3 = std::exp(3.0);
  EXPECT_NEAR(out.get(0), (2.0 * e3 + 6.0) / (e3 + 1.0), 1e-2);
  EXPECT_NEAR(lse.get(0), std::log(e3 + 1.0), 1e-5);
}

TEST_P(Semantics, EmptyProblemsSucceedAndWriteNothing) {
  const Backend be = GetParam();
  // B = 0, Sq = 0, Hq = Hkv = 0: no output elements; Sk = 0: covered above.
  for (auto dims : {std::vector<int64_t>{0, 3, 4, 2, 2}, {2, 0, 4, 2, 2}, {2, 3, 5, 0, 0}, {2, 3, 5, 0, 2}, {0, 0, 0, 0, 0}}) {
    Tiny t(dims[0], dims[1], dims[2], dims[3], dims[4], 8);
    const Status st = t.run(be);
    EXPECT_TRUE(st.ok()) << st.message;
    EXPECT_TRUE(t.out.empty());
  }
}

TEST_P(Semantics, VarlenSequencesOfLengthZeroAreSkipped) {
  CaseConfig cfg;
  cfg.varlen_q = true;
  cfg.kv = KvMode::varlen;
  cfg.batch = 4;
  cfg.hq = 2;
  cfg.hkv = 1;
  cfg.dqk = cfg.dv = 4;
  cfg.lens_q = {0, 3, 2, 0};
  cfg.lens_k = {4, 0, 2, 0};
  cfg.causal = true;
  const uint64_t seed = derive_seed(54000);
  FA4_SEED_TRACE(seed);
  Case c = make_case(cfg, seed);
  ASSERT_TRUE(c.run(GetParam()).ok());
  // Sequence 1 has queries but no keys: exactly 0 / -inf. Sequence 2: regular.
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t d = 0; d < 4; ++d) EXPECT_EQ(c.out.get(c.out_off(1, i, h, d)), 0.0f);
      EXPECT_EQ(c.lse.get(c.lse_off(1, h, i)), kNegInfF);
    }
  EXPECT_TRUE(compare_expected(c, naive_attention(c), tol_for(cfg.dtype)));
}

INSTANTIATE_TEST_SUITE_P(Backends, Semantics, ::testing::Values(Backend::reference, Backend::cpu),
                         [](const auto& info) { return std::string(fa4::backend_name(info.param)); });

// ---------------------------------------------------------------- combine_partials
class Combine : public ::testing::TestWithParam<Backend> {};

TEST_P(Combine, HandComputedMerge) {
  // Two splits of one row, D = 2: lse (log 1, log 3), O (2, 6) and (1, -1).
  std::vector<float> op = {2.0f, 1.0f, 6.0f, -1.0f};  // [S=2, B=1, Sq=1, H=1, D=2]
  std::vector<float> lp = {0.0f, std::log(3.0f)};     // [S=2, B=1, H=1, Sq=1]
  std::vector<float> out(2, std::nanf("")), lse(1, std::nanf(""));
  fa4::CombineParams c;
  c.out_partials = TensorView::contiguous(op.data(), DType::float32, {2, 1, 1, 1, 2});
  c.lse_partials = TensorView::contiguous(lp.data(), DType::float32, {2, 1, 1, 1});
  c.out = TensorView::contiguous(out.data(), DType::float32, {1, 1, 1, 2});
  c.lse = TensorView::contiguous(lse.data(), DType::float32, {1, 1, 1});
  c.backend = GetParam();
  ASSERT_TRUE(fa4::combine_partials(c).ok());
  EXPECT_NEAR(out[0], (1 * 2.0 + 3 * 6.0) / 4.0, 1e-6);
  EXPECT_NEAR(out[1], (1 * 1.0 + 3 * -1.0) / 4.0, 1e-6);
  EXPECT_NEAR(lse[0], std::log(4.0f), 1e-6);
}

TEST_P(Combine, AllSplitsEmptyGivesZeroAndMinusInfinity) {
  std::vector<float> op = {0.0f, 0.0f, 0.0f};
  std::vector<float> lp(3, kNegInfF);
  std::vector<float> out(1, std::nanf("")), lse(1, std::nanf(""));
  fa4::CombineParams c;
  c.out_partials = TensorView::contiguous(op.data(), DType::float32, {3, 1, 1, 1, 1});
  c.lse_partials = TensorView::contiguous(lp.data(), DType::float32, {3, 1, 1, 1});
  c.out = TensorView::contiguous(out.data(), DType::float32, {1, 1, 1, 1});
  c.lse = TensorView::contiguous(lse.data(), DType::float32, {1, 1, 1});
  c.backend = GetParam();
  ASSERT_TRUE(fa4::combine_partials(c).ok());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(lse[0], kNegInfF);
}

TEST_P(Combine, AnEmptySplitContributesNothing) {
  std::vector<float> op = {5.0f, 0.0f};  // split 1 saw no key: O 0, lse -inf
  std::vector<float> lp = {1.25f, kNegInfF};
  std::vector<float> out(1, std::nanf("")), lse(1, std::nanf(""));
  fa4::CombineParams c;
  c.out_partials = TensorView::contiguous(op.data(), DType::float32, {2, 1, 1, 1, 1});
  c.lse_partials = TensorView::contiguous(lp.data(), DType::float32, {2, 1, 1, 1});
  c.out = TensorView::contiguous(out.data(), DType::float32, {1, 1, 1, 1});
  c.lse = TensorView::contiguous(lse.data(), DType::float32, {1, 1, 1});
  c.backend = GetParam();
  ASSERT_TRUE(fa4::combine_partials(c).ok());
  EXPECT_NEAR(out[0], 5.0f, 1e-6);
  EXPECT_NEAR(lse[0], 1.25f, 1e-6);
}

// Partials within the weights' rounding of FLT_MAX: sum_s (w_s / sum w) O_s is at most max |O_s|
// in exact arithmetic (here FLT_MAX, -FLT_MAX, or a cancelling mix), but the fp32 weights can
// sum to 1 + 2^-23 and the fp32 sum then rounds to +-inf (these lse sets did on cpu: the merge of
// fuzz finding new13's kind). The result must be the fp64 merge's: finite, within fp32 rounding.
TEST_P(Combine, PartialsNearFltMaxMergeToAFiniteValue) {
  constexpr float kMax = std::numeric_limits<float>::max();
  const std::vector<std::vector<float>> lses = {
      {0.390085727f, 1.57439828f},
      {2.63442755f, 2.01158428f, 0.295040518f},
      {2.67640758f, 2.42217398f, 1.13275301f, 1.19303048f},
      {0.708266914f, 0.277015775f, 1.18974221f, 0.558780611f, 1.16373229f},
      {0.75f, 0.75f, 0.75f, 0.75f, 0.75f, 0.75f, 0.75f},
  };
  for (const std::vector<float>& lp : lses) {
    const int64_t S = static_cast<int64_t>(lp.size()), D = 4;
    SCOPED_TRACE("splits " + std::to_string(S));
    std::vector<float> op(static_cast<size_t>(S * D));
    double m = lp[0], denom = 0, want[D] = {0, 0, 0, 0};
    for (float x : lp) m = std::max<double>(m, x);
    for (float x : lp) denom += std::exp(x - m);
    for (int64_t s = 0; s < S; ++s) {
      const float x[D] = {kMax, -kMax, s % 2 ? kMax : 3e38f, s % 3 ? -kMax : -3.3e38f};
      for (int64_t d = 0; d < D; ++d) {
        op[static_cast<size_t>(s * D + d)] = x[d];
        want[d] += std::exp(lp[static_cast<size_t>(s)] - m) / denom * x[d];
      }
    }
    std::vector<float> out(D, std::nanf("")), lse(1, std::nanf(""));
    fa4::CombineParams c;
    c.out_partials = TensorView::contiguous(op.data(), DType::float32, {S, 1, 1, 1, D});
    c.lse_partials = TensorView::contiguous(const_cast<float*>(lp.data()), DType::float32, {S, 1, 1, 1});
    c.out = TensorView::contiguous(out.data(), DType::float32, {1, 1, 1, D});
    c.lse = TensorView::contiguous(lse.data(), DType::float32, {1, 1, 1});
    c.backend = GetParam();
    ASSERT_TRUE(fa4::combine_partials(c).ok());
    for (int64_t d = 0; d < D; ++d) {
      EXPECT_TRUE(std::isfinite(out[d])) << "d=" << d << ": " << out[d];
      EXPECT_NEAR(out[d], want[d], 1e-6 * kMax) << "d=" << d;
    }
    EXPECT_NEAR(lse[0], m + std::log(denom), 1e-5);
  }
}

// Attention over keys [0, a) and [a, Sk) separately (strided views into the same k/v), combined,
// equals attention over all keys.
TEST_P(Combine, MergingKeyRangePartialsEqualsFullAttention) {
  const Backend be = GetParam();
  for (int rep = 0; rep < 6; ++rep) {
    const uint64_t seed = derive_seed(55000 + rep);
    FA4_SEED_TRACE(seed);
    std::mt19937_64 rng(seed);
    const int64_t B = 2, Sq = 3, Sk = 11, H = 3, D = 5, S = 3;
    const int64_t cut[S + 1] = {0, 4, 4 + static_cast<int64_t>(rng() % 7), Sk};  // one split may be empty
    std::vector<float> q(B * Sq * H * D), k(B * Sk * H * D), v(B * Sk * H * D);
    for (auto* x : {&q, &k, &v})
      for (auto& e : *x) e = sample(Dist::normal, rng);
    std::vector<float> full(B * Sq * H * D), full_lse(B * H * Sq);
    std::vector<float> op(S * B * Sq * H * D), lp(S * B * H * Sq);
    auto run = [&](int64_t j0, int64_t j1, float* o, float* l) {
      AttentionParams p;
      p.q = TensorView::contiguous(q.data(), DType::float32, {B, Sq, H, D});
      p.k = TensorView::contiguous(k.data() + j0 * H * D, DType::float32, {B, j1 - j0, H, D});
      p.v = TensorView::contiguous(v.data() + j0 * H * D, DType::float32, {B, j1 - j0, H, D});
      p.k.stride[0] = p.v.stride[0] = Sk * H * D;  // a window of the full tensors
      p.out = TensorView::contiguous(o, DType::float32, {B, Sq, H, D});
      p.lse = TensorView::contiguous(l, DType::float32, {B, H, Sq});
      p.backend = Backend::reference;
      return fa4::attention_forward(p);
    };
    ASSERT_TRUE(run(0, Sk, full.data(), full_lse.data()).ok());
    for (int64_t s = 0; s < S; ++s)
      ASSERT_TRUE(run(cut[s], cut[s + 1], op.data() + s * B * Sq * H * D, lp.data() + s * B * H * Sq).ok());
    std::vector<float> out(B * Sq * H * D, std::nanf("")), lse(B * H * Sq, std::nanf(""));
    fa4::CombineParams c;
    c.out_partials = TensorView::contiguous(op.data(), DType::float32, {S, B, Sq, H, D});
    c.lse_partials = TensorView::contiguous(lp.data(), DType::float32, {S, B, H, Sq});
    c.out = TensorView::contiguous(out.data(), DType::float32, {B, Sq, H, D});
    c.lse = TensorView::contiguous(lse.data(), DType::float32, {B, H, Sq});
    c.backend = be;
    ASSERT_TRUE(fa4::combine_partials(c).ok());
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], full[i], 2e-6) << i;
    for (size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], full_lse[i], 2e-6) << i;
  }
}

TEST_P(Combine, RandomPartialsMatchTheFormulaInEveryOutputDtype) {
  const Backend be = GetParam();
  for (DType odt : {DType::float32, DType::float16, DType::bfloat16})
    for (int rep = 0; rep < 3; ++rep) {
      const uint64_t seed = derive_seed(56000 + rep + 10 * static_cast<int>(odt));
      FA4_SEED_TRACE(seed);
      std::mt19937_64 rng(seed);
      const int64_t S = 1 + static_cast<int64_t>(rng() % 5), B = 2, Sq = 3, H = 2, D = 1 + static_cast<int64_t>(rng() % 70);
      Tensor op = Tensor::make(DType::float32, {S, B, Sq, H, D}, rep == 1 ? Layout::padded : Layout::contiguous, &rng);
      Tensor lp = Tensor::make(DType::float32, {S, B, H, Sq}, rep == 2 ? Layout::padded : Layout::contiguous, &rng);
      fill(op, Dist::normal, rng);
      fill(lp, Dist::normal, rng, 4.0f);
      // Some rows entirely -inf (empty), some splits -inf.
      lp.set(lp.off({0, 0, 0, 0}), kNegInfF);
      for (int64_t s = 0; s < S; ++s) lp.set(lp.off({s, 1, 1, 2}), kNegInfF);
      Tensor out = Tensor::make(odt, {B, Sq, H, D}, rep == 2 ? Layout::bhsd : Layout::contiguous, &rng);
      Tensor lse = Tensor::make(DType::float32, {B, H, Sq});
      fa4::CombineParams c;
      c.out_partials = op.view();
      c.lse_partials = lp.view();
      c.out = out.view();
      c.lse = lse.view();
      c.backend = be;
      ASSERT_TRUE(fa4::combine_partials(c).ok());
      const double otol = odt == DType::float32 ? 1e-5 : odt == DType::float16 ? 4e-3 : 3e-2;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < Sq; ++i)
          for (int64_t h = 0; h < H; ++h) {
            double m = -INFINITY;
            for (int64_t s = 0; s < S; ++s) m = std::max(m, static_cast<double>(lp.get(lp.off({s, b, h, i}))));
            double den = 0;
            std::vector<double> acc(D, 0.0);
            if (m != -INFINITY)
              for (int64_t s = 0; s < S; ++s) {
                const double w = std::exp(lp.get(lp.off({s, b, h, i})) - m);
                den += w;
                for (int64_t d = 0; d < D; ++d) acc[d] += w * op.get(op.off({s, b, i, h, d}));
              }
            for (int64_t d = 0; d < D; ++d) {
              const float got = out.get(out.off({b, i, h, d}));
              const double want = m == -INFINITY ? 0.0 : acc[d] / den;
              ASSERT_FALSE(out.is_poison(out.off({b, i, h, d})));
              if (m == -INFINITY) EXPECT_EQ(got, 0.0f);
              else EXPECT_NEAR(got, want, otol * std::max(1.0, std::fabs(want)));
            }
            const float gl = lse.get(lse.off({b, h, i}));
            if (m == -INFINITY) EXPECT_EQ(gl, kNegInfF);
            else EXPECT_NEAR(gl, m + std::log(den), 1e-5);
          }
    }
}

TEST_P(Combine, ZeroPartialsGiveEmptyRows) {
  std::vector<float> op(1), lp(1);
  std::vector<float> out(6, std::nanf("")), lse(2, std::nanf(""));
  fa4::CombineParams c;
  c.out_partials = TensorView::contiguous(op.data(), DType::float32, {0, 1, 1, 2, 3});
  c.lse_partials = TensorView::contiguous(lp.data(), DType::float32, {0, 1, 2, 1});
  c.out = TensorView::contiguous(out.data(), DType::float32, {1, 1, 2, 3});
  c.lse = TensorView::contiguous(lse.data(), DType::float32, {1, 2, 1});
  c.backend = GetParam();
  const Status st = fa4::combine_partials(c);
  ASSERT_TRUE(st.ok()) << st.message;
  for (float x : out) EXPECT_EQ(x, 0.0f);
  for (float x : lse) EXPECT_EQ(x, kNegInfF);
}

INSTANTIATE_TEST_SUITE_P(Backends, Combine, ::testing::Values(Backend::reference, Backend::cpu),
                         [](const auto& info) { return std::string(fa4::backend_name(info.param)); });

}  // namespace
}  // namespace fa4test
