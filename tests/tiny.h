// A small dense fp32 attention problem with hand-set values (tests of exact semantics).
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

namespace fa4test {

struct Tiny {
  int64_t B, Sq, Sk, Hq, Hkv, D, Dv;
  std::vector<float> q, k, v, out, lse, sinks;
  AttentionParams p;

  Tiny(int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d, int64_t dv = -1)
      : B(b), Sq(sq), Sk(sk), Hq(hq), Hkv(hkv), D(d), Dv(dv < 0 ? d : dv) {
    q.assign(static_cast<size_t>(B * Sq * Hq * D), 0.0f);
    k.assign(static_cast<size_t>(B * Sk * Hkv * D), 0.0f);
    v.assign(static_cast<size_t>(B * Sk * Hkv * Dv), 0.0f);
    out.assign(static_cast<size_t>(B * Sq * Hq * Dv), std::nanf(""));
    lse.assign(static_cast<size_t>(B * Hq * Sq), std::nanf(""));
  }
  float& Q(int64_t b, int64_t i, int64_t h, int64_t d) { return q[static_cast<size_t>(((b * Sq + i) * Hq + h) * D + d)]; }
  float& K(int64_t b, int64_t j, int64_t h, int64_t d) { return k[static_cast<size_t>(((b * Sk + j) * Hkv + h) * D + d)]; }
  float& V(int64_t b, int64_t j, int64_t h, int64_t d) { return v[static_cast<size_t>(((b * Sk + j) * Hkv + h) * Dv + d)]; }
  float O(int64_t b, int64_t i, int64_t h, int64_t d) const { return out[static_cast<size_t>(((b * Sq + i) * Hq + h) * Dv + d)]; }
  float L(int64_t b, int64_t h, int64_t i) const { return lse[static_cast<size_t>((b * Hq + h) * Sq + i)]; }

  // Fills the views (keeps the scalar fields of p as the test set them).
  AttentionParams& params(Backend be) {
    p.q = TensorView::contiguous(q.data(), DType::float32, {B, Sq, Hq, D});
    p.k = TensorView::contiguous(k.data(), DType::float32, {B, Sk, Hkv, D});
    p.v = TensorView::contiguous(v.data(), DType::float32, {B, Sk, Hkv, Dv});
    p.out = TensorView::contiguous(out.data(), DType::float32, {B, Sq, Hq, Dv});
    p.lse = TensorView::contiguous(lse.data(), DType::float32, {B, Hq, Sq});
    if (!sinks.empty()) p.sinks = TensorView::contiguous(sinks.data(), DType::float32, {Hq});
    p.backend = be;
    return p;
  }
  Status run(Backend be) {
    std::fill(out.begin(), out.end(), std::nanf(""));
    std::fill(lse.begin(), lse.end(), std::nanf(""));
    return fa4::attention_forward(params(be));
  }
};

inline constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

}  // namespace fa4test
