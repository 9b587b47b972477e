// The lse bound of e4m3 inputs on fp8 tensor cores (test_util.h kFp8MmaLseQk, QkNorms, applied
// by the device suites' gpu_tol), checked on the CPU: the norms of a hand-made case; an emulated
// fp8 accumulator that truncates its sum to 13 fraction bits stays inside the bound (and outside
// DESIGN §4's plain 1e-3 at D 256, which is why the bound exists); lse bugs a kernel could have
// (an offset of 0.1, a lost 2^8 P shift, log2 for ln, a dropped k descale, the wrong kv head) fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using namespace fa4test;

// x truncated toward zero to 13 fraction bits (an e8m13 value).
double trunc13(double x) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  int e = 0;
  const double m = std::frexp(std::fabs(x), &e);  // [0.5, 1)
  return std::copysign(std::ldexp(std::floor(std::ldexp(m, 14)), e - 14), x);
}

// q . k as a tensor core that adds `group` exact products to its accumulator at a time and
// truncates the sum to 13 fraction bits after each group (group 32: once per k32 wgmma); group 0:
// exact (fp64).
double fp8_mma_dot(const std::vector<double>& q, const std::vector<double>& k, size_t group) {
  if (group == 0) {
    double s = 0.0;
    for (size_t d = 0; d < q.size(); ++d) s += q[d] * k[d];
    return s;
  }
  double acc = 0.0;
  for (size_t d0 = 0; d0 < q.size(); d0 += group) {
    double s = acc;
    for (size_t d = d0; d < std::min(q.size(), d0 + group); ++d) s += q[d] * k[d];  // exact: 8-bit products
    acc = trunc13(s);
  }
  return acc;
}

// The e4m3 values of q row (b, i, h) and of key j (kv head hk), before their descales.
std::vector<double> q8(const Case& c, int64_t b, int64_t i, int64_t h) {
  std::vector<double> r(static_cast<size_t>(c.cfg.dqk));
  for (int64_t d = 0; d < c.cfg.dqk; ++d) r[static_cast<size_t>(d)] = c.q.get(c.q_off(b, i, h, d));
  return r;
}
std::vector<double> k8(const Case& c, int64_t b, int64_t j, int64_t hk) {
  std::vector<double> r(static_cast<size_t>(c.cfg.dqk));
  for (int64_t d = 0; d < c.cfg.dqk; ++d) {
    int64_t o = 0;
    const Tensor& t = c.key_src(b, j, hk, d, false, &o);
    r[static_cast<size_t>(d)] = t.get(o);
  }
  return r;
}

// Writes into out.lse every row's lse of case c in fp64, with logit(b, i, h, hk, j) in place of
// scale q.k (softcap, sinks and the mask as the definition has them).
template <class Logit>
void write_lse(Case& out, const Case& c, Logit logit) {
  const int64_t g = c.cfg.hq / c.cfg.hkv;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < c.lq[b]; ++i)
      for (int64_t h = 0; h < c.cfg.hq; ++h) {
        std::vector<double> s;
        for (int64_t j = 0; j < c.lk[b]; ++j) {
          if (!c.visible(b, i, j)) continue;
          double x = logit(b, i, h, h / g, j);
          if (c.cfg.softcap > 0) x = c.cfg.softcap * std::tanh(x / c.cfg.softcap);
          s.push_back(x);
        }
        const double sink = c.sink(h);
        double m = sink;
        for (double x : s) m = std::max(m, x);
        double lse = -INFINITY;
        if (m != -INFINITY) {
          double z = std::exp(sink - m);
          for (double x : s) z += std::exp(x - m);
          lse = m + std::log(z);
        }
        out.lse.set(out.lse_off(b, h, i), static_cast<float>(lse));
      }
}

// scale q.k x descales with q.k from fp8_mma_dot (group products per truncation).
auto mma_logit(const Case& c, size_t group) {
  return [&c, group](int64_t b, int64_t i, int64_t h, int64_t hk, int64_t j) {
    return c.scale() * c.descale(c.q_descale, b, hk) * c.descale(c.k_descale, b, hk) *
           fp8_mma_dot(q8(c, b, i, h), k8(c, b, j, hk), group);
  };
}

Tol fp8_tol() {
  Tol t = tol_for(DType::float8_e4m3);
  t.lse_qk = kFp8MmaLseQk;
  return t;
}

// An all-fp8 case of cfg (made e4m3, with lse), run by the reference.
Case reference_case(CaseConfig& cfg, uint64_t tag) {
  cfg.dtype = DType::float8_e4m3;
  cfg.lse = true;
  Case c = make_case(cfg, derive_seed(tag));
  const Status st = c.run(Backend::reference);
  EXPECT_TRUE(st.ok()) << st.message;
  return c;
}

TEST(Fp8LseBound, QkNormsOfAHandMadeCase) {
  CaseConfig cfg;
  cfg.batch = 2, cfg.hq = 4, cfg.hkv = 2, cfg.dqk = cfg.dv = 16, cfg.sq = 3, cfg.sk = 5;
  cfg.descale = true;
  Case c = reference_case(cfg, 1);
  // Row (b 1, i 2, h 3) -> kv head 1: q = 1 everywhere (||q8|| = 4); keys of (b 1, hk 1): zero but
  // key 0 = (2, 0, ...) and key 3 = (3, 4, 0, ...) (norm 5), key 4 with a NaN (not counted).
  // Larger keys of batch 0 and of kv head 0 must not count.
  for (int64_t d = 0; d < cfg.dqk; ++d) c.q.set(c.q_off(1, 2, 3, d), 1.0f);
  auto set_k = [&](int64_t b, int64_t j, int64_t hk, int64_t d, float x) {
    int64_t o = 0;
    const_cast<Tensor&>(c.key_src(b, j, hk, d, false, &o)).set(o, x);
  };
  for (int64_t j = 0; j < 5; ++j)
    for (int64_t d = 0; d < cfg.dqk; ++d) {
      set_k(1, j, 1, d, 0.0f);
      set_k(0, j, 1, d, 100.0f);
      set_k(1, j, 0, d, 100.0f);
    }
  set_k(1, 0, 1, 0, 2.0f);
  set_k(1, 3, 1, 0, 3.0f);
  set_k(1, 3, 1, 1, 4.0f);
  set_k(1, 4, 1, 5, NAN);
  const double dq = c.descale(c.q_descale, 1, 1), dk = c.descale(c.k_descale, 1, 1);
  const QkNorms norms(c);
  EXPECT_NEAR(norms(1, 2, 3), 0.25 * 4.0 * dq * 5.0 * dk, 1e-12);  // scale 1 / sqrt(16)

  // compare_runs: that row's lse may move by 1e-3 + 2^-10 x it, not more (2 ulp of fp32 aside).
  const Case ref = reference_case(cfg, 2);
  const QkNorms rn(ref);
  const int64_t o = ref.lse_off(1, 3, 2);
  const double slack = fp8_tol().lse_abs + kFp8MmaLseQk * rn(1, 2, 3);
  for (double f : {0.9, -0.9, 1.1, -1.1}) {
    Case t = ref;
    t.lse.set(o, static_cast<float>(ref.lse.get(o) + f * slack));
    EXPECT_EQ(static_cast<bool>(compare_runs(t, ref, fp8_tol())), std::fabs(f) < 1) << f;
  }
}

// The lse of an accumulator that truncates to 13 fraction bits every 8 products (finer than once
// per k32 wgmma: a pessimistic model of the hardware) passes the bound; at D 256 it fails the
// plain 1e-3 of DESIGN §4.
TEST(Fp8LseBound, HoldsForATruncatingFp8Accumulator) {
  struct Shape {
    int64_t d;
    Dist dist;
    bool causal, descale, softcap_sinks;
  };
  const Shape shapes[] = {{64, Dist::normal, false, true, false},   {64, Dist::outliers, true, false, false},
                          {128, Dist::normal, true, true, false},   {128, Dist::outliers, false, true, true},
                          {256, Dist::normal, false, true, false},  {256, Dist::outliers, false, false, false},
                          {256, Dist::uniform, true, true, false},  {256, Dist::normal, false, true, true}};
  int k = 0;
  double worst[2] = {0.0, 0.0};  // group 32, 8: the largest (|error| - 1e-3) / (scale ||q|| max ||k||)
  int beyond_plain = 0;          // D 256, group 8 cases whose lse error the plain 1e-3 refuses
  for (const Shape& sh : shapes) {
    CaseConfig cfg;
    cfg.batch = 2, cfg.hq = 4, cfg.hkv = 2, cfg.dqk = cfg.dv = sh.d, cfg.sq = 48, cfg.sk = 200;
    cfg.dist = sh.dist, cfg.causal = sh.causal, cfg.descale = sh.descale;
    if (sh.softcap_sinks) cfg.softcap = 20.0f, cfg.sinks = true;
    const Case ref = reference_case(cfg, 10 + k++);
    SCOPED_TRACE(cfg.describe());
    for (size_t group : {32, 8}) {
      Case t = ref;
      write_lse(t, ref, mma_logit(ref, group));
      lse_qk_seen() = {};
      EXPECT_TRUE(compare_runs(t, ref, fp8_tol())) << "group " << group;
      worst[group == 8] = std::max(worst[group == 8], lse_qk_seen().ratio);
      if (sh.d == 256 && group == 8 && !sh.softcap_sinks) {
        Tol plain = fp8_tol();
        plain.lse_qk = 0.0;
        beyond_plain += !compare_runs(t, ref, plain);
      }
    }
  }
  // Whether one such case stays within 1e-3 depends on the random inputs (uniform causal D 256
  // came to 1.0009e-3 in one seed of CI, within 2 ulp of the plain tolerance); over the three
  // D 256 cases the bound is needed every time.
  EXPECT_GE(beyond_plain, 1) << "every emulated D 256 error fits 1e-3: the bound would not be needed";
  std::printf("largest lse error beyond 1e-3 / (scale ||q|| max ||k||): 2^%.1f (a truncation per 32 products), "
              "2^%.1f (per 8); the bound: 2^%.1f; D 256 cases beyond the plain 1e-3: %d of 3\n",
              std::log2(worst[0]), std::log2(worst[1]), std::log2(kFp8MmaLseQk), beyond_plain);
}

// What the bound must still catch, on normal inputs of ||q|| max ||k|| scale ~ 50 (lse ~ 10-30).
TEST(Fp8LseBound, CatchesLseBugs) {
  CaseConfig cfg;
  cfg.batch = 2, cfg.hq = 4, cfg.hkv = 2, cfg.dqk = cfg.dv = 128, cfg.sq = 40, cfg.sk = 150;
  cfg.causal = true;
  for (bool descale : {false, true}) {
    cfg.descale = descale;
    const Case ref = reference_case(cfg, 20 + descale);
    SCOPED_TRACE(cfg.describe());
    ASSERT_TRUE(compare_runs(ref, ref, fp8_tol()));
    auto fails = [&](const char* what, auto mutate) {
      Case t = ref;
      for (int64_t o : t.lse.offsets()) {
        const float x = t.lse.get(o);
        if (std::isfinite(x)) t.lse.set(o, static_cast<float>(mutate(static_cast<double>(x))));
      }
      EXPECT_FALSE(compare_runs(t, ref, fp8_tol())) << what;
    };
    auto fails_with = [&](const char* what, auto logit) {
      Case t = ref;
      write_lse(t, ref, logit);
      EXPECT_FALSE(compare_runs(t, ref, fp8_tol())) << what;
    };
    if (!descale) fails("every lse + 0.1", [](double x) { return x + 0.1; });
    fails("the 2^8 P shift left in (+ 8 ln 2)", [](double x) { return x + 8 * std::log(2.0); });
    fails("log2 for ln", [](double x) { return x / std::log(2.0); });
    const auto exact = mma_logit(ref, 0);
    fails_with("keys of the next kv head", [&](int64_t b, int64_t i, int64_t h, int64_t hk, int64_t j) {
      return exact(b, i, h, (hk + 1) % cfg.hkv, j);
    });
    if (descale)
      fails_with("k descale dropped", [&](int64_t b, int64_t i, int64_t h, int64_t hk, int64_t j) {
        return exact(b, i, h, hk, j) / ref.descale(ref.k_descale, b, hk);
      });
  }
}

}  // namespace
