// Portable kernels: plain C++ loops the compiler may auto-vectorize for whatever the baseline
// ISA is. Same contracts as the AVX2 table (see cpu_kernels.h); used on CPUs without AVX2+FMA
// and as a cross-check.
#include <cmath>
#include <limits>

#include "core/element.h"
#include "cpu/cpu_kernels.h"

namespace fa4::core::cpu {
namespace {

void qk_generic(const float* qt, int64_t mp, int64_t mc, int64_t d, const float* const* krows, int64_t nk, float* st) {
  for (int64_t n = 0; n < nk; ++n) {
    float* srow = st + n * mp;
    for (int64_t m = 0; m < mc; ++m) srow[m] = 0.0f;
    const float* k = krows[n];
    for (int64_t dd = 0; dd < d; ++dd) {
      const float kv = k[dd];
      const float* q = qt + dd * mp;
      for (int64_t m = 0; m < mc; ++m) srow[m] += kv * q[m];
    }
  }
}

void pv_generic(const float* pt, int64_t mp, int64_t mc, int64_t nk, const float* const* vrows, int64_t dv,
                const float* alpha, float* ot) {
  for (int64_t e = 0; e < dv; ++e) {
    float* o = ot + e * mp;
    for (int64_t m = 0; m < mc; ++m) o[m] *= alpha[m];
    for (int64_t n = 0; n < nk; ++n) {
      const float v = vrows[n][e];
      const float* p = pt + n * mp;
      for (int64_t m = 0; m < mc; ++m) o[m] += v * p[m];
    }
  }
}

void softmax_generic(const SoftmaxStep& s) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  constexpr float kLog2e = 1.4426950408889634f;
  for (int64_t m = 0; m < s.m; ++m) {
    float mx = kNegInf;
    for (int64_t n = 0; n < s.nk; ++n) {
      float& x = s.st[n * s.mp + m];
      if (s.softcap_in != 0.0f) x = s.softcap_out * std::tanh(x * s.softcap_in);
      if (s.lo && (n < s.lo[m] || n >= s.hi[m])) x = kNegInf;
      mx = std::fmax(mx, x);  // NaN scores still poison the row through l below
    }
    const float m_old = s.m_run[m];
    const float m_new = std::fmax(m_old, mx);
    const float m_use = m_new == kNegInf ? 0.0f : m_new;  // all masked so far: avoid -inf - -inf
    float sum = 0.0f;
    bool zero = false;
    for (int64_t n = 0; n < s.nk; ++n) {
      float& x = s.st[n * s.mp + m];
      x = std::exp2((x - m_use) * kLog2e);  // log2(e) after the max: s - m <= 0 cannot overflow
      sum += x;
      zero |= x == 0.0f;
    }
    if (zero && s.zero_p) *s.zero_p = 1;
    const float a = std::exp2((m_old - m_use) * kLog2e);
    s.alpha[m] = a;
    s.l_run[m] = s.l_run[m] * a + sum;
    s.m_run[m] = m_new;
  }
}

void convert_generic(const void* src, DType t, int64_t stride, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load_f32(src, i * stride, t);
}

}  // namespace

const float* e4m3_lut() {
  static const struct Table {
    float v[256];
    Table() {
      for (int i = 0; i < 256; ++i) v[i] = e4m3_to_f32(static_cast<uint8_t>(i));
    }
  } table;
  return table.v;
}

const uint16_t* e4m3_bf16_lut() {
  static const struct Table {
    alignas(64) uint16_t v[128];
    Table() {
      for (int i = 0; i < 128; ++i) v[i] = f32_to_bf16(e4m3_to_f32(static_cast<uint8_t>(i)));
    }
  } table;
  return table.v;
}

const Kernels& generic_kernels() {
  static const Kernels k{"generic", 8, qk_generic, pv_generic, softmax_generic, nullptr, nullptr, convert_generic,
                         nullptr, nullptr};
  return k;
}

}  // namespace fa4::core::cpu
