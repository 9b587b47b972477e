// One key tile of the 16-bit (bf16) prefill path, piece by piece, on one thread: the AMX table's
// qk (S^T = K Q^T), its softmax step (P^T straight into the pv panel) and pv (O^T += V^T P^T),
// as the driver (cpu_backend.cpp) calls them. Not part of the CMake build:
//
//   g++ -std=c++17 -O2 -march=native -Isrc -Iinclude bench/cpu_tile_bench.cpp -o build-cpu/cpu_tile_bench
//     build-cpu/libfa4.a -fopenmp     (one line)
//   taskset -c 0 build-cpu/cpu_tile_bench [D] [rows] [keys] [strip] [calls] [table] [nofold]
//
// Prints us per tile for each piece alone (the same call repeated: its data stay where the
// previous call left them) and for the whole sequence, tile rows cut in strips of `strip` rows
// (0 = the whole tile at once, as the driver does by default), min over 7 rounds of `calls`.
// table: amx (default) or avx512 (vdpbf16ps products); nofold: the softmax step's own max pass
// instead of LowpKernels::qk_max's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "cpu/cpu_kernels.h"

using namespace fa4;
using namespace fa4::core::cpu;

namespace {

int64_t rup(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

template <class F>
double best_us(int calls, F&& f) {
  double best = 1e30;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) f();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, us / calls);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t d = argc > 1 ? std::atoll(argv[1]) : 128;
  const int64_t rows = argc > 2 ? std::atoll(argv[2]) : 96;
  const int64_t nk = argc > 3 ? std::atoll(argv[3]) : 512;
  const int64_t strip = argc > 4 && std::atoll(argv[4]) > 0 ? std::atoll(argv[4]) : rows;
  const int calls = argc > 5 ? std::atoi(argv[5]) : 2000;
  const bool amx = !(argc > 6 && std::strcmp(argv[6], "avx512") == 0);
  if (amx && !amx_usable()) {
    std::fprintf(stderr, "AMX not usable here\n");
    return 1;
  }
  const Kernels& K = amx ? amx_kernels() : avx512_kernels(true);
  const LowpKernels& L = *K.lowp_bf16;
  const int64_t mp = rows, dqk_p = rup(d, 32), nk_p = rup(nk, 32), dv_p = rup(d, 16);

  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto rows_of = [&](int64_t n, std::vector<uint16_t>& store, std::vector<const void*>& ptr) {
    store.resize(n * d);
    for (auto& x : store) x = core::f32_to_bf16(nd(rng));
    ptr.resize(n);
    for (int64_t i = 0; i < n; ++i) ptr[i] = store.data() + i * d;
  };
  std::vector<uint16_t> qs, ks, vs;
  std::vector<const void*> qp, kp, vp;
  rows_of(rows, qs, qp);
  rows_of(nk, ks, kp);
  rows_of(nk, vs, vp);

  auto alloc = [](size_t bytes) { return std::aligned_alloc(4096, rup(static_cast<int64_t>(bytes), 4096)); };
  auto* qv = static_cast<uint16_t*>(alloc(dqk_p * mp * 2));
  auto* kb = static_cast<uint16_t*>(alloc(nk_p * dqk_p * 2));
  auto* vt = static_cast<uint16_t*>(alloc(dv_p * nk_p * 2));
  auto* pp = static_cast<uint16_t*>(alloc(nk_p * mp * 4));
  auto* st = static_cast<float*>(alloc(nk_p * mp * 4));
  auto* ot = static_cast<float*>(alloc(dv_p * mp * 4));
  std::vector<float> m_run(mp), l_run(mp), alpha(mp);
  std::vector<uint8_t> redo(mp);
  std::vector<float> raw_max(mp), raw_min(mp);
  const bool fold = L.qk_max && !(argc > 7 && std::strcmp(argv[7], "nofold") == 0);  // max pass in qk
  std::memset(ot, 0, dv_p * mp * 4);
  L.pack_q_rows(qp.data(), DType::bfloat16, rows, mp, d, 1.0f, 1, qv);
  L.pack_k(kp.data(), DType::bfloat16, nk, d, 1, kb);
  L.pack_v(vp.data(), DType::bfloat16, nk, d, 1, vt);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  if (L.begin) L.begin();

  // The running max is reset before each step so every step sees the same scores (alpha = 1
  // after the first: the O^T rescale is skipped as in a steady tile whose max did not move).
  auto qk = [&](int64_t s0, int64_t sm) {
    const float qs_ = L.raw_scores ? 1.0f : scale;
    if (fold) L.qk_max(qv + s0 * 2, mp, sm, d, kb, nk_p, nk, 1, st + s0, raw_max.data() + s0, raw_min.data() + s0);
    else L.qk(qv + s0 * 2, mp, sm, d, kb, nk_p, nk, 1, qs_, st + s0);
  };
  auto softmax = [&](int64_t s0, int64_t sm) {
    SoftmaxStep s;
    s.st = st + s0;
    s.nk = nk;
    s.mp = mp;
    s.m = sm;
    s.lo = s.hi = nullptr;
    s.softcap_in = s.softcap_out = 0.0f;
    s.m_run = m_run.data() + s0;
    s.l_run = l_run.data() + s0;
    s.alpha = alpha.data() + s0;
    s.pp = pp;
    s.terms = 1;
    if (L.raw_scores) {
      s.scale = scale;
      s.redo = redo.data() + s0;
    }
    if (fold) {
      s.raw_max = raw_max.data() + s0;
      s.raw_min = raw_min.data() + s0;
    }
    std::fill(m_run.begin() + s0, m_run.begin() + s0 + sm, 8.0f);
    K.softmax(s);
  };
  auto pv = [&](int64_t s0, int64_t sm) { L.pv(nullptr, mp, sm, nk, vt, nk_p, d, 1, alpha.data() + s0, pp, ot + s0); };
  auto whole = [&] {
    for (int64_t s0 = 0; s0 < rows; s0 += strip) {
      const int64_t sm = std::min(strip, rows - s0);
      qk(s0, sm);
      softmax(s0, sm);
      pv(s0, sm);
    }
  };
  whole();
  const double t_qk = best_us(calls, [&] { qk(0, rows); });
  const double t_sm = best_us(calls, [&] { softmax(0, rows); });
  const double t_pv = best_us(calls, [&] { pv(0, rows); });
  const double t_all = best_us(calls, whole);
  // qk in 64-key chunks whose S^T all land on the first chunk's 24 KB (L1-resident stores): the
  // cost of the tile stores that go past L1 in the real layout (results meaningless).
  const double t_qk_l1 = best_us(calls, [&] {
    for (int64_t c = 0; c < nk; c += 64) L.qk(qv, mp, rows, d, kb + c * dqk_p, nk_p, std::min<int64_t>(64, nk - c), 1, 1.0f, st);
  });
  std::printf("qk with L1-resident S^T stores: %.2f us\n", t_qk_l1);
  const double flop = 4.0 * rows * nk * d;
  std::printf("%s D %lld, %lld rows x %lld keys, strip %lld: qk %.2f us, softmax %.2f, pv %.2f (alone); "
              "tile %.2f us = %.0f GFLOP/s\n",
              amx ? "amx" : "avx512", static_cast<long long>(d), static_cast<long long>(rows),
              static_cast<long long>(nk), static_cast<long long>(strip), t_qk, t_sm, t_pv, t_all, flop / t_all / 1e3);
  if (L.end) L.end();
  return 0;
}
