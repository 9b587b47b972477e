// The AVX2 table's row-major decode kernels (qk_rows_avx2 / pv_rows_avx2) alone, on L2-resident
// decode tiles: K / V [keys][8 kv heads][128], 4 tiles of 32 keys, every head's 32-key call in
// turn (run_unit's steps after its touch pass). Prints ns per key and head (thread CPU time, so a
// busy machine's time slices do not count; min of 7 runs) for q.k, P V and both.
//
//   g++ -O3 -fno-math-errno -std=c++20 -mavx2 -mfma -mf16c -Isrc -Iinclude
//       bench/cpu_rows_avx2_bench.cpp -o /tmp/cpu_rows_avx2_bench        (one line)
//   /tmp/cpu_rows_avx2_bench ROWS [b|h|e]     (query rows per kv head 1..8; bf16, fp16, e4m3 K / V)
//
// The kernel file is compiled into this program (its kernels have internal linkage); the two
// e4m3 tables it declares are not read by the row kernels and are stubbed.
#include "cpu/cpu_kernels_avx2.cpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

namespace fa4::core::cpu {
const float* e4m3_lut() {
  static float t[256];
  return t;
}
const uint16_t* e4m3_bf16_lut() {
  static uint16_t t[128];
  return t;
}
}  // namespace fa4::core::cpu

int main(int argc, char** argv) {
  using namespace fa4::core::cpu;
  const int H = 8, D = 128, NK = 32, tiles = 4;
  const int R = argc > 1 ? std::clamp(atoi(argv[1]), 1, 8) : 4;
  const char t = argc > 2 ? argv[2][0] : 'b';
  const fa4::DType dt = t == 'e' ? fa4::DType::float8_e4m3 : t == 'h' ? fa4::DType::float16 : fa4::DType::bfloat16;
  // Values near 1 (e4m3 0x38 = 1.0, two per 16-bit element), elements of 2 bytes (e4m3 rows use half).
  const uint16_t base = t == 'e' ? 0x3838 : t == 'h' ? 0x3c00 : 0x3f80, spread = t == 'e' ? 0 : t == 'h' ? 0x3ff : 0x7f;
  std::vector<uint16_t> K(size_t(NK) * tiles * H * D), V(K.size());
  for (auto& x : K) x = base + (rand() & spread);
  for (auto& x : V) x = base + (rand() & spread);
  std::vector<float> q(8 * D, 0.01f), st(NK * 8, 0.001f), o(8 * D, 0.0f), alpha(8, 1.0f);
  std::vector<const void*> kr(NK), vr(NK);
  auto run = [&](int which) {
    const int reps = 2000;
    timespec a0, a1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a0);
    for (int rep = 0; rep < reps; ++rep)
      for (int tl = 0; tl < tiles; ++tl)
        for (int h = 0; h < H; ++h) {
          for (int j = 0; j < NK; ++j) {
            kr[j] = &K[((size_t(tl) * NK + j) * H + h) * D];
            vr[j] = &V[((size_t(tl) * NK + j) * H + h) * D];
          }
          if (which & 1) avx2_kernels().qk_rows(q.data(), R, D, kr.data(), dt, NK, st.data());
          if (which & 2) avx2_kernels().pv_rows(st.data(), R, NK, vr.data(), dt, D, alpha.data(), o.data());
        }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a1);
    const double s = double(a1.tv_sec - a0.tv_sec) + 1e-9 * double(a1.tv_nsec - a0.tv_nsec);
    return s / (double(reps) * tiles * H * NK) * 1e9;
  };
  double a = 1e9, b = 1e9, c = 1e9;
  for (int it = 0; it < 7; ++it) a = std::min(a, run(1)), b = std::min(b, run(2)), c = std::min(c, run(3));
  printf("rows %d %s: qk %.2f  pv %.2f  both %.2f ns per key and head\n", R,
         t == 'e' ? "e4m3" : t == 'h' ? "fp16" : "bf16", a, b, c);
  return o[0] == 12345.0f;  // keeps the results live
}
