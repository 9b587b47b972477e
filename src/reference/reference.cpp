// The reference backend: the definition of the function, written as plainly as possible, with
// fp64 accumulation. Every other backend is tested against it; speed is no concern here.
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

}  // namespace

Status reference_forward(const Problem& pb) {
  const AttentionParams& p = *pb.p;
  std::vector<double> s, acc(pb.dv);
  std::vector<int64_t> keys;
  for (int64_t b = 0; b < pb.batch; ++b) {
    const SeqMask sm = pb.seq_mask(b);
    for (int64_t h = 0; h < pb.hq; ++h) {
      const int64_t hk = h / pb.group;
      const double dq = pb.descale_q(b, hk), dk = pb.descale_k(b, hk), dvs = pb.descale_v(b, hk);
      for (int64_t i = 0; i < sm.sq; ++i) {
        // Scores of the visible keys.
        keys.clear();
        s.clear();
        const int64_t qo = pb.q_offset(b, i, h);
        for (int64_t j = 0; j < sm.sk; ++j) {
          if (!sm.visible(i, j)) continue;
          const int64_t ko = pb.k_offset(b, j, hk);
          double dot = 0.0;
          for (int64_t d = 0; d < pb.dqk; ++d)
            dot += static_cast<double>(load_f32(p.q.data, qo + d * pb.qs.dim, pb.dtype)) *
                   static_cast<double>(load_f32(p.k.data, ko + d * pb.ks.dim, pb.dtype));
          double x = static_cast<double>(pb.scale) * dot * dq * dk;
          if (pb.softcap > 0.0f) x = pb.softcap * std::tanh(x / pb.softcap);
          keys.push_back(j);
          s.push_back(x);
        }
        // Softmax with the optional sink logit in the denominator.
        double m = kNegInf;
        for (double x : s) m = nan_max(m, x);
        const double sink = pb.has_sinks ? static_cast<double>(pb.sink(h)) : kNegInf;
        m = nan_max(m, sink);
        double denom = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        if (m != kNegInf) {
          if (pb.has_sinks) denom += std::exp(sink - m);
          for (size_t t = 0; t < keys.size(); ++t) {
            const double e = std::exp(s[t] - m);
            denom += e;
            const int64_t vo = pb.v_offset(b, keys[t], hk);
            for (int64_t d = 0; d < pb.dv; ++d)
              acc[d] += e * static_cast<double>(load_f32(p.v.data, vo + d * pb.vs.dim, pb.dtype)) * dvs;
          }
        }
        // Empty row (nothing visible, no sink): O = 0, lse = -inf.
        const bool empty = m == kNegInf;
        const int64_t oo = pb.out_offset(b, i, h);
        for (int64_t d = 0; d < pb.dv; ++d)
          store_f32(p.out.data, oo + d * pb.os.dim, pb.out_dtype, empty ? 0.0f : static_cast<float>(acc[d] / denom));
        if (pb.has_lse)
          static_cast<float*>(p.lse.data)[pb.lse_offset(b, i, h)] =
              empty ? -std::numeric_limits<float>::infinity() : static_cast<float>(m + std::log(denom));
      }
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
