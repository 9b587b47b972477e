// The 16-bit panel packers alone (LowpKernels::pack_k / pack_v / pack_q_rows of the AVX-512
// table, which the AMX table shares), one thread. Not part of the CMake build:
//
//   g++ -std=c++17 -O2 -march=native -Isrc -Iinclude bench/cpu_pack_bench.cpp -o build/cpu_pack_bench
//     build/libfa4.a -fopenmp     (one line)
//   taskset -c 0 build/cpu_pack_bench time [rounds] [bshd]  # us per 512-key K / V tile, 96-row Q
//   taskset -c 0 build/cpu_pack_bench hot [rounds]          # one tile over and over (in L2)
//   build/cpu_pack_bench check                              # a hash of every packed panel + flags
//
// `time` packs every 512-key tile of H 16 heads x S 2048 keys and the 96-row Q tiles of the same
// tensors (8 MB each, beyond L2, as the backend's panel pass sees them), at D 64 / 128 / 256,
// bf16 and fp16, median of the rounds. Layout BHSD (a head's rows contiguous: what
// bench/cpu_ab.py passes) or, with `bshd`, BSHD (rows H D apart: what tools/fa4 run passes).
// `check` runs odd shapes (key counts that are not a multiple of 32, dims that are not a
// multiple of 16 / 32) and special values (bf16 subnormals, +-inf, NaN, -0, fp16 extremes), with
// Q scales that leave the normal range, and prints one hash per case: two builds whose lines
// match pack bit-identically (run it against a build of the base commit and diff).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <immintrin.h>

#include "cpu/cpu_kernels.h"

using namespace fa4;
using namespace fa4::core::cpu;

namespace {

int64_t rup(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
uint16_t to_f16(float f) { return _cvtss_sh(f, 0); }

void* aligned(size_t bytes) { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }

uint64_t fnv(const void* p, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Buffers {
  uint16_t *kb, *vt, *qv;
  Buffers(int64_t nk, int64_t d, int64_t mp, int terms) {
    const int64_t dp = rup(d, 32), nk_p = rup(nk, 32);
    // Filled with a pattern first: every byte of the panels must be written by the packers.
    kb = static_cast<uint16_t*>(aligned(2 * terms * nk_p * dp));
    vt = static_cast<uint16_t*>(aligned(2 * terms * rup(d, 16) * nk_p));
    qv = static_cast<uint16_t*>(aligned(2 * terms * dp * mp));
    std::memset(kb, 0xa5, 2 * terms * nk_p * dp);
    std::memset(vt, 0xa5, 2 * terms * rup(d, 16) * nk_p);
    std::memset(qv, 0xa5, 2 * terms * dp * mp);
  }
  ~Buffers() {
    std::free(kb);
    std::free(vt);
    std::free(qv);
  }
};

// ---- check ----
void check_case(const LowpKernels& L, DType t, int64_t n, int64_t d, int64_t mp, int64_t qn, float pow2, int special,
                uint32_t seed) {
  const int terms = t == DType::float16 ? 2 : 1;
  const int64_t stride = d + 8;  // rows not contiguous, not aligned
  const int64_t rows = std::max(n, qn);
  std::vector<uint16_t> data(static_cast<size_t>(rows * stride * 3 + 64));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  for (auto& x : data) x = t == DType::float16 ? to_f16(nd(rng)) : to_bf16(nd(rng));
  if (special) {
    // bf16: subnormals, +-0, +-inf, NaNs (quiet and signaling), max / min normal;
    // fp16: subnormals, +-inf, NaN, 65504, -0.
    const uint16_t bf[] = {0x0001, 0x807f, 0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc1, 0x7f81, 0x7f7f, 0x0080, 0x0040};
    const uint16_t hf[] = {0x0001, 0x83ff, 0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e01, 0x7c01, 0x7bff, 0x0400};
    const uint16_t* sv = t == DType::float16 ? hf : bf;
    const int nsv = t == DType::float16 ? 10 : 11;
    std::uniform_int_distribution<size_t> pos(0, data.size() - 1);
    const int count = special == 1 ? 3 : 40;
    for (int i = 0; i < count; ++i) data[pos(rng)] = sv[rng() % nsv];
  }
  std::vector<const void*> kr(n), vr(n), qr(qn);
  for (int64_t j = 0; j < n; ++j) kr[j] = &data[j * stride], vr[j] = &data[(rows + j) * stride];
  for (int64_t i = 0; i < qn; ++i) qr[i] = &data[(2 * rows + i) * stride + 1];  // 2-byte offset
  Buffers b(n, d, mp, terms);
  const int kf = L.pack_k(kr.data(), t, n, d, terms, b.kb);
  const int vf = L.pack_v(vr.data(), t, n, d, terms, b.vt);
  const int qf = L.pack_q_rows(qr.data(), t, qn, mp, d, pow2, terms, b.qv);
  const int64_t dp = rup(d, 32), nk_p = rup(n, 32);
  std::printf("%s n %3lld d %3lld mp %3lld qn %3lld pow2 %-10g special %d | k %d %016llx v %d %016llx q %d %016llx\n",
              t == DType::float16 ? "f16 " : "bf16", (long long)n, (long long)d, (long long)mp, (long long)qn, pow2,
              special, kf, (unsigned long long)fnv(b.kb, 2 * terms * nk_p * dp), vf,
              (unsigned long long)fnv(b.vt, 2 * terms * rup(d, 16) * nk_p), qf,
              (unsigned long long)fnv(b.qv, 2 * terms * dp * mp));
}

void check(const LowpKernels& L) {
  uint32_t seed = 1;
  for (DType t : {DType::bfloat16, DType::float16})
    for (int64_t d : {8, 16, 40, 48, 64, 72, 80, 96, 112, 128, 136, 200, 256})
      for (int64_t n : {1, 17, 31, 32, 33, 100, 512})
        for (int special : {0, 1, 2}) {
          const int64_t mp = n % 3 == 0 ? 96 : n > 32 ? 48 : 16;
          const int64_t qn = std::min<int64_t>(mp, n);
          for (float pow2 : {1.0f, 0.125f, 0x1p-120f, 0x1p100f, 8.0f}) check_case(L, t, n, d, mp, qn, pow2, special, seed++);
        }
}

// ---- time ----
void time_packers(const LowpKernels& L, int rounds, bool hot, bool bshd) {
  const int64_t H = 16, S = 2048, NK = 512, MQ = 96;
  std::printf("us per tile, median of %d rounds (K / V: 512 keys, Q: 96 rows x pow2 0.125), %s%s\n", rounds,
              bshd ? "BSHD" : "BHSD", hot ? ", one tile over and over (in L2)" : "");
  std::printf("%-5s %4s %9s %9s %9s\n", "dtype", "D", "pack_k", "pack_v", "pack_q");
  for (DType t : {DType::bfloat16, DType::float16})
    for (int64_t d : {64, 128, 256}) {
      const int terms = t == DType::float16 ? 2 : 1;
      std::vector<uint16_t> k(H * S * d), v(H * S * d), q(H * S * d);
      std::mt19937 rng(7);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (auto* a : {&k, &v, &q})
        for (auto& x : *a) x = t == DType::float16 ? to_f16(nd(rng)) : to_bf16(nd(rng));
      // Element offset of row s of head h: BHSD (a head's rows contiguous) or BSHD (H D apart).
      auto at = [&](int64_t h, int64_t s) { return bshd ? (s * H + h) * d : (h * S + s) * d; };
      const int64_t tiles = H * (S / NK), qtiles = H * ((S + MQ - 1) / MQ);
      // One panel buffer for all tiles, as the backend's pass writes them.
      const int64_t dp = rup(d, 32), kbytes = 2 * terms * NK * dp, vbytes = 2 * terms * rup(d, 16) * NK;
      auto* panels = static_cast<char*>(aligned(tiles * (kbytes + vbytes)));
      auto* qv = static_cast<uint16_t*>(aligned(2 * terms * dp * MQ));
      std::memset(panels, 0, tiles * (kbytes + vbytes));
      std::vector<const void*> kr(NK), vr(NK), qr(MQ);
      std::vector<double> tk, tv, tq;
      for (int r = 0; r < rounds; ++r) {
        double sk = 0, sv = 0;
        for (int64_t tile0 = 0; tile0 < tiles; ++tile0) {
          const int64_t tile = hot ? 0 : tile0;
          const int64_t h = tile / (S / NK), j0 = tile % (S / NK) * NK;
          for (int64_t j = 0; j < NK; ++j) kr[j] = &k[at(h, j0 + j)], vr[j] = &v[at(h, j0 + j)];
          char* slot = panels + tile * (kbytes + vbytes);
          const double t0 = now_us();
          L.pack_k(kr.data(), t, NK, d, terms, reinterpret_cast<uint16_t*>(slot));
          const double t1 = now_us();
          L.pack_v(vr.data(), t, NK, d, terms, reinterpret_cast<uint16_t*>(slot + kbytes));
          const double t2 = now_us();
          sk += t1 - t0;
          sv += t2 - t1;
        }
        double sq = 0;
        for (int64_t qt0 = 0; qt0 < qtiles; ++qt0) {
          const int64_t qt = hot ? 0 : qt0;
          const int64_t h = qt / ((S + MQ - 1) / MQ), i0 = qt % ((S + MQ - 1) / MQ) * MQ;
          const int64_t rows = std::min(MQ, S - i0);
          for (int64_t i = 0; i < rows; ++i) qr[i] = &q[at(h, i0 + i)];
          const double t0 = now_us();
          L.pack_q_rows(qr.data(), t, rows, MQ, d, 0.125f, terms, qv);
          sq += now_us() - t0;
        }
        tk.push_back(sk / tiles);
        tv.push_back(sv / tiles);
        tq.push_back(sq / qtiles);
      }
      for (auto* a : {&tk, &tv, &tq}) std::sort(a->begin(), a->end());
      std::printf("%-5s %4lld %9.2f %9.2f %9.2f\n", t == DType::float16 ? "f16" : "bf16", (long long)d,
                  tk[rounds / 2], tv[rounds / 2], tq[rounds / 2]);
      std::free(panels);
      std::free(qv);
    }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "time";
  const LowpKernels& L = avx512_lowp();
  if (mode == "check") check(L);
  else time_packers(L, argc > 2 ? std::atoi(argv[2]) : 9, mode == "hot", argc > 3 && std::string(argv[3]) == "bshd");
  return 0;
}
