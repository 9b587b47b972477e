// Calls fa4::attention_forward on the cpu backend; exit 0 when it succeeds and O is the mean of V
// (one query over keys that all score the same).
#include <fa4/fa4.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  const int64_t B = 1, S = 4, H = 2, D = 8;
  std::vector<float> q(B * S * H * D, 0.0f), k(q.size(), 0.0f), v(q.size()), out(q.size(), -1.0f);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 7);
  fa4::AttentionParams p;
  p.q = fa4::TensorView::contiguous(q.data(), fa4::DType::float32, {B, S, H, D});
  p.k = fa4::TensorView::contiguous(k.data(), fa4::DType::float32, {B, S, H, D});
  p.v = fa4::TensorView::contiguous(v.data(), fa4::DType::float32, {B, S, H, D});
  p.out = fa4::TensorView::contiguous(out.data(), fa4::DType::float32, {B, S, H, D});
  p.backend = fa4::Backend::cpu;
  fa4::Status st = fa4::attention_forward(p);
  if (!st) {
    std::fprintf(stderr, "attention_forward: %s\n", st.message.c_str());
    return 1;
  }
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        double mean = 0;
        for (int64_t j = 0; j < S; ++j) mean += v[((j * H) + h) * D + d];
        mean /= S;
        float o = out[((s * H) + h) * D + d];
        if (std::fabs(o - mean) > 1e-5) {
          std::fprintf(stderr, "out[%lld,%lld,%lld] = %g, expected %g\n", (long long)s,
                       (long long)h, (long long)d, o, mean);
          return 1;
        }
      }
  std::printf("fa4 %s: attention_forward on the cpu backend ok\n", fa4::version());
  return 0;
}
