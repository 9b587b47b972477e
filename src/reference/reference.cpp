// The reference backend: the definition of the function, written as plainly as possible, with
// fp64 accumulation. Every other backend is tested against it; speed is no concern here.
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "core/backends.h"
#include "core/element.h"

namespace fa4::core {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// max that propagates NaN (std::max would depend on argument order).
double nan_max(double a, double b) { return (std::isnan(a) || std::isnan(b)) ? std::nan("") : (a > b ? a : b); }

constexpr int64_t kMaxDv = 256;  // the largest head dim validation accepts (src/core/validate.cpp)

}  // namespace

// One query row (b, i, h) of the definition, in fp64. Two passes over the visible keys (the max,
// then the weighted sum; a logit is recomputed rather than stored, so no allocation): the cpu
// backend calls this from its worker threads for rows whose fp32 scores overflowed.
void reference_row(const Problem& pb, int64_t b, int64_t i, int64_t h, float* o, float* lse) {
  const AttentionParams& p = *pb.p;
  const SeqMask sm = pb.seq_mask(b);
  const int64_t hk = h / pb.group;
  const double dq = pb.descale_q(b, hk);
  const int64_t qo = pb.q_offset(b, i, h);
  // The logit of key j: scale * q.k * descales, then softcap. Finite for every finite input:
  // |q.k| <= 256 * FLT_MAX^2 and scale, descales, softcap are fp32, far inside fp64's range.
  // The K / V factors are those of key j (per (batch, kv head), or per token for an fp8 KV
  // cache); fp8 K / V values times them are exact in fp64.
  auto logit = [&](int64_t j) {
    const int64_t ko = pb.k_offset(b, j, hk);
    double dot = 0.0;
    for (int64_t d = 0; d < pb.dqk; ++d)
      dot += static_cast<double>(load_f32(p.q.data, qo + d * pb.qs.dim, pb.dtype)) *
             static_cast<double>(load_f32(p.k.data, ko + d * pb.ks.dim, pb.kv_dtype));
    double x = static_cast<double>(pb.scale) * dot * dq * static_cast<double>(pb.k_scale(b, j, hk));
    if (pb.softcap > 0.0f) x = pb.softcap * std::tanh(x / pb.softcap);
    return x;
  };
  // Softmax with the optional sink logit in the denominator.
  double m = kNegInf;
  for (int64_t j = 0; j < sm.sk; ++j)
    if (sm.visible(i, j)) m = nan_max(m, logit(j));
  const double sink = pb.has_sinks ? static_cast<double>(pb.sink(h)) : kNegInf;
  m = nan_max(m, sink);
  double denom = 0.0;
  std::array<double, kMaxDv> acc{};
  if (m != kNegInf) {
    if (pb.has_sinks) denom += std::exp(sink - m);
    for (int64_t j = 0; j < sm.sk; ++j) {
      if (!sm.visible(i, j)) continue;
      const double lj = logit(j), e = std::exp(lj - m);
      denom += e;
      // exp(lj - m) > 0 for a finite logit even where fp64 underflows it: an infinite V then
      // still counts (inf, not 0 * inf = NaN), as in exact arithmetic
      const bool underflow = e == 0.0 && std::isfinite(lj);
      const int64_t vo = pb.v_offset(b, j, hk);
      const double dvs = pb.v_scale(b, j, hk);
      for (int64_t d = 0; d < pb.dv; ++d) {
        const double vd = static_cast<double>(load_f32(p.v.data, vo + d * pb.vs.dim, pb.kv_dtype)) * dvs;
        acc[d] += underflow && std::isinf(vd) ? vd : e * vd;
      }
    }
  }
  // Empty row (nothing visible, no sink): O = 0, lse = -inf.
  const bool empty = m == kNegInf;
  for (int64_t d = 0; d < pb.dv; ++d) o[d] = empty ? 0.0f : static_cast<float>(acc[d] / denom);
  *lse = empty ? -std::numeric_limits<float>::infinity() : static_cast<float>(m + std::log(denom));
}

// The rows are independent, so the (batch, head) pairs run on OpenMP's threads: each row's sums
// run in the same order on any thread, so the result does not depend on the thread count, and
// validation has refused outputs whose rows overlap. (The test suites spend most of their time
// here: a device suite's fp64 references took minutes on one core.)
Status reference_forward(const Problem& pb) {
  const AttentionParams& p = *pb.p;
  const int64_t pairs = pb.batch * pb.hq;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t x = 0; x < pairs; ++x) {
    const int64_t b = x / pb.hq, h = x % pb.hq;
    std::array<float, kMaxDv> o{};
    for (int64_t i = 0; i < pb.seqlen_q[b]; ++i) {
      float lse = 0.0f;
      reference_row(pb, b, i, h, o.data(), &lse);
      const int64_t oo = pb.out_offset(b, i, h);
      for (int64_t d = 0; d < pb.dv; ++d) store_f32(p.out.data, oo + d * pb.os.dim, pb.out_dtype, o[d]);
      if (pb.has_lse) static_cast<float*>(p.lse.data)[pb.lse_offset(b, i, h)] = lse;
    }
  }
  return Status::Ok();
}

Status reference_combine(const CombineParams& c) {
  const TensorView &op = c.out_partials, &lp = c.lse_partials;
  const int64_t S = op.shape[0], B = op.shape[1], Sq = op.shape[2], H = op.shape[3], D = op.shape[4];
  const auto* o = static_cast<const float*>(op.data);
  const auto* l = static_cast<const float*>(lp.data);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Sq; ++i)
      for (int64_t h = 0; h < H; ++h) {
        double m = kNegInf;
        for (int64_t s = 0; s < S; ++s)
          m = nan_max(m, l[s * lp.stride[0] + b * lp.stride[1] + h * lp.stride[2] + i * lp.stride[3]]);
        double denom = 0.0;
        std::vector<double> w(S, 0.0);
        if (m != kNegInf) {
          for (int64_t s = 0; s < S; ++s) {
            w[s] = std::exp(l[s * lp.stride[0] + b * lp.stride[1] + h * lp.stride[2] + i * lp.stride[3]] - m);
            denom += w[s];
          }
        }
        const bool empty = m == kNegInf;
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0.0;
          if (!empty)
            for (int64_t s = 0; s < S; ++s) {
              if (w[s] == 0.0) continue;  // a split that saw nothing contributes nothing (its O may be 0)
              acc += w[s] / denom *
                     o[s * op.stride[0] + b * op.stride[1] + i * op.stride[2] + h * op.stride[3] + d * op.stride[4]];
            }
          store_f32(c.out.data, b * c.out.stride[0] + i * c.out.stride[1] + h * c.out.stride[2] + d * c.out.stride[3],
                    c.out.dtype, static_cast<float>(acc));
        }
        if (c.lse.present())
          static_cast<float*>(c.lse.data)[b * c.lse.stride[0] + h * c.lse.stride[1] + i * c.lse.stride[2]] =
              empty ? -std::numeric_limits<float>::infinity() : static_cast<float>(m + std::log(denom));
      }
  return Status::Ok();
}

// The oracle has no tiles or splits: every row is one fp64 pass over its visible keys.
void reference_describe(const Problem&, PlanInfo* info) { info->kernel = "fp64"; }

}  // namespace fa4::core
