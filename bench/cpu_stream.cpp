// Streaming-read ceiling of this machine, for the CPU decode bar of issue 16 ("decode >= 80% of
// the memory bandwidth a streaming read reaches"): an AVX-512 (or AVX2 / scalar) sum over a
// buffer much larger than the last-level cache, OpenMP over --threads threads, each thread
// summing its own contiguous part (first-touched by that thread). Prints GB/s (1e9 bytes / s),
// min / median / max over the reps.
//
//   built as build*/bench/fa4_cpu_stream (bench/CMakeLists.txt), or by hand:
//   g++ -O2 -march=native -fopenmp bench/cpu_stream.cpp -o build-cpu/cpu_stream
//   build-cpu/cpu_stream [--threads N] [--mb MB] [--reps N]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

// 16 floats as one AVX-512 register, two AVX2 ones, or plain floats: the tool builds with
// -march=native on any x86 machine (an AVX2-only one failed to compile the AVX-512 intrinsics).
#if defined(__AVX512F__)
using V16 = __m512;
static inline V16 v16_zero() { return _mm512_setzero_ps(); }
static inline V16 v16_load(const float* p) { return _mm512_load_ps(p); }
static inline V16 v16_add(V16 a, V16 b) { return _mm512_add_ps(a, b); }
static inline double v16_sum(V16 a) { return _mm512_reduce_add_ps(a); }
#elif defined(__AVX2__)
struct V16 {
  __m256 lo, hi;
};
static inline V16 v16_zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline V16 v16_load(const float* p) { return {_mm256_load_ps(p), _mm256_load_ps(p + 8)}; }
static inline V16 v16_add(V16 a, V16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
static inline double v16_sum(V16 a) {
  alignas(32) float x[8];
  _mm256_store_ps(x, _mm256_add_ps(a.lo, a.hi));
  double s = 0;
  for (float f : x) s += f;
  return s;
}
#else
struct V16 {
  float x[16];
};
static inline V16 v16_zero() { return V16{}; }
static inline V16 v16_load(const float* p) {
  V16 v;
  std::memcpy(v.x, p, sizeof v.x);
  return v;
}
static inline V16 v16_add(V16 a, V16 b) {
  for (int i = 0; i < 16; ++i) a.x[i] += b.x[i];
  return a;
}
static inline double v16_sum(V16 a) {
  double s = 0;
  for (float f : a.x) s += f;
  return s;
}
#endif

static double sum_range(const float* p, int64_t n) {
  V16 a0 = v16_zero(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = v16_add(a0, v16_load(p + i));
    a1 = v16_add(a1, v16_load(p + i + 16));
    a2 = v16_add(a2, v16_load(p + i + 32));
    a3 = v16_add(a3, v16_load(p + i + 48));
  }
  double s = v16_sum(v16_add(v16_add(a0, a1), v16_add(a2, a3)));
  for (; i < n; ++i) s += p[i];
  return s;
}

// Decode-order reads over K and V of [keys][8 heads][128] bf16 (256-byte rows, a head's rows 2 KB
// apart), the same bytes as the plain sum with one add per 64 bytes:
//   order 0: fa4's row-major decode (ba098f6): per 32-key tile, per head, the tile's K rows then
//            its V rows;
//   order 1: per tile, per head, K row and V row of each key in turn (one walk);
//   order 2: per tile, per block of 4 keys, every head's K rows (8 KB contiguous), then V;
//   order 3: per tile, the tile's K (64 KB contiguous) then its V;
//   order N >= 4: per tile, K then V, each in blocks of N keys x every head (N must divide 32).
inline void row4(const float* r, V16* a0, V16* a1) {
  *a0 = v16_add(*a0, v16_add(v16_load(r), v16_load(r + 16)));
  *a1 = v16_add(*a1, v16_add(v16_load(r + 32), v16_load(r + 48)));
}
// pf > 0 (orders 0 / 1): each row read also prefetches (prefetcht0) the same row pf
// (head, tile) steps later, as fa4's row kernels do since 9baea55.
inline void pf_row(const float* r) {
  for (int i = 0; i < 4; ++i) __builtin_prefetch(reinterpret_cast<const char*>(r) + 64 * i, 0, 3);
}
static double decode_walk(const float* k, const float* v, int64_t keys, int order, int pf) {
  constexpr int64_t kRow = 64, kHeads = 8, kTile = 32;  // floats per 256-byte row
  V16 a0 = v16_zero(), a1 = a0;
  for (int64_t j0 = 0; j0 + kTile <= keys; j0 += kTile) {
    if (order == 0 || order == 1) {
      for (int64_t h = 0; h < kHeads; ++h) {
        const int64_t at = h + pf, ph = at % kHeads, pj0 = j0 + at / kHeads * kTile;
        const bool dopf = pf > 0 && pj0 + kTile <= keys;
        for (int64_t j = j0; j < j0 + kTile; ++j) {
          if (dopf) pf_row(k + ((pj0 + j - j0) * kHeads + ph) * kRow);
          if (dopf) pf_row(v + ((pj0 + j - j0) * kHeads + ph) * kRow);
          row4(k + (j * kHeads + h) * kRow, &a0, &a1);
          if (order == 1) row4(v + (j * kHeads + h) * kRow, &a0, &a1);
        }
        if (order == 0)
          for (int64_t j = j0; j < j0 + kTile; ++j) row4(v + (j * kHeads + h) * kRow, &a0, &a1);
      }
    } else if (order >= 4) {  // per tile: K then V, each in blocks of `order` keys x every head
      const int64_t blk = order;
      for (const float* base : {k, v})
        for (int64_t b0 = j0; b0 < j0 + kTile; b0 += blk)
          for (int64_t h = 0; h < kHeads; ++h)
            for (int64_t j = b0; j < b0 + blk; ++j) row4(base + (j * kHeads + h) * kRow, &a0, &a1);
    } else {
      const int64_t blk = order == 2 ? 4 : kTile;
      for (int64_t b0 = j0; b0 < j0 + kTile; b0 += blk) {
        for (int64_t h = 0; h < kHeads; ++h)
          for (int64_t j = b0; j < b0 + blk; ++j) row4(k + (j * kHeads + h) * kRow, &a0, &a1);
        for (int64_t h = 0; h < kHeads; ++h)
          for (int64_t j = b0; j < b0 + blk; ++j) row4(v + (j * kHeads + h) * kRow, &a0, &a1);
      }
    }
  }
  return v16_sum(v16_add(a0, a1));
}

int main(int argc, char** argv) {
  int threads = 1, reps = 10;
  int decode = -1, pf = 0;
  int64_t mb = 2048;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--mb") && i + 1 < argc) mb = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--decode") && i + 1 < argc) decode = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--pf") && i + 1 < argc) pf = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--threads N] [--mb MB] [--reps N] [--decode ORDER [--pf STEPS]]\n", argv[0]);
      return 2;
    }
  }
  const int64_t n = mb * (int64_t{1} << 20) / 4;
  float* buf = static_cast<float*>(std::aligned_alloc(2 << 20, n * 4));
  if (!buf) return 3;
  omp_set_num_threads(threads);
  // Each thread's part, 64-element aligned.
  auto part = [&](int t, int64_t* lo, int64_t* hi) {
    const int64_t per = (n / threads) / 64 * 64;
    *lo = t * per;
    *hi = t == threads - 1 ? n : *lo + per;
  };
#pragma omp parallel
  {
    int64_t lo, hi;
    part(omp_get_thread_num(), &lo, &hi);
    for (int64_t i = lo; i < hi; ++i) buf[i] = static_cast<float>(i & 7) * 0.125f;
  }
  std::vector<double> gbs;
  double sink = 0;
  for (int r = 0; r < reps + 1; ++r) {
    double s = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : s)
    {
      int64_t lo, hi;
      part(omp_get_thread_num(), &lo, &hi);
      if (decode >= 0) {  // this thread's part: its first half K, second half V (whole 2 KB keys)
        const int64_t keys = (hi - lo) / 2 / 512;
        s += decode_walk(buf + lo, buf + lo + keys * 512, keys, decode, pf);
      } else {
        s += sum_range(buf + lo, hi - lo);
      }
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink += s;
    if (r > 0) gbs.push_back(static_cast<double>(n) * 4 / sec / 1e9);  // first rep: warm-up
  }
  std::sort(gbs.begin(), gbs.end());
  if (decode >= 0) std::printf("order %d pf %d ", decode, pf);
  std::printf("%s: threads %d, %lld MB, reps %d: GB/s min %.2f median %.2f max %.2f (checksum %g)\n",
              decode >= 0 ? "decode-order read" : "stream read", threads,
              static_cast<long long>(mb), reps, gbs.front(), gbs[gbs.size() / 2], gbs.back(), sink);
  std::free(buf);
  return 0;
}
