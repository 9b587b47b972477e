/* The C ABI (fa4/fa4_c.h) on the cpu backend; exit 0 when the call succeeds and O is the mean of
 * V (one query over keys that all score the same), and a bad call is refused with a message. */
#include <fa4/fa4_c.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { B = 1, S = 4, H = 2, D = 8, N = B * S * H * D };

static fa4_tensor view(float* data) {
  fa4_tensor t;
  int64_t shape[4] = {B, S, H, D};
  int i;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = FA4_FLOAT32;
  t.ndim = 4;
  t.device = FA4_DEVICE_CPU;
  for (i = 0; i < 4; ++i) t.shape[i] = shape[i];
  t.stride[3] = 1;
  for (i = 2; i >= 0; --i) t.stride[i] = t.stride[i + 1] * shape[i + 1];
  return t;
}

int main(void) {
  static float q[N], k[N], v[N], out[N];
  fa4_params p;
  int i, s, h, d, j, rc;
  for (i = 0; i < N; ++i) {
    v[i] = (float)(i % 7);
    out[i] = -1.0f;
  }
  memset(&p, 0, sizeof p);
  fa4_params_init(&p);
  p.q = view(q);
  p.k = view(k);
  p.v = view(v);
  p.out = view(out);
  p.backend = FA4_BACKEND_CPU;
  rc = fa4_attention_forward(&p);
  if (rc != FA4_OK) {
    fprintf(stderr, "fa4_attention_forward: %d %s\n", rc, fa4_last_error());
    return 1;
  }
  for (s = 0; s < S; ++s)
    for (h = 0; h < H; ++h)
      for (d = 0; d < D; ++d) {
        double mean = 0;
        for (j = 0; j < S; ++j) mean += v[(j * H + h) * D + d];
        mean /= S;
        if (fabs(out[(s * H + h) * D + d] - mean) > 1e-5) {
          fprintf(stderr, "out[%d,%d,%d] = %g, expected %g\n", s, h, d, out[(s * H + h) * D + d],
                  mean);
          return 1;
        }
      }
  p.out.ndim = 0; /* no output: must be refused, naming the argument */
  if (fa4_attention_forward(&p) == FA4_OK || fa4_last_error()[0] == '\0') {
    fprintf(stderr, "a call without out was not refused\n");
    return 1;
  }
  printf("fa4 %s: C ABI on the cpu backend ok\n", fa4_version());
  return 0;
}
