// fa4's hand-written 16-bit tile products (LowpKernels: S^T = K Q^T, O^T += V^T P^T) against
// oneDNN's ukernel brgemm (S = Q K^T, O += P V) on the same bf16 tile, one thread, interleaved
// rounds, medians (issue 16: "measure both and say why you chose"). Not part of the CMake build:
// bench/cpu_brgemm_ab.sh finds oneDNN (built with ONEDNN_EXPERIMENTAL_UKERNEL=ON), builds
// build-cpu/libfa4.a and compiles this file against both.
//
//   cpu_brgemm_ab [rounds] [ms per timed batch]
//
// Per fa4 table (amx when usable, avx512 with AVX512_BF16) and per D in {64, 128, 256} it times:
//   fa4 qk   L.qk on packed Q (pack_q_rows) and K (pack_k): S^T [keys][rows] fp32
//   fa4 pv   L.pv(st = nullptr) on P^T pairs (pack_p_avx512, as the softmax step leaves them)
//            and packed V (pack_v), alpha = 1: O^T [D][rows] fp32 += V^T P^T
//   dnnl qk  brgemm M = rows, N = 64 (or 32) keys per call, K = D, A = Q rows (bf16, lda = D),
//            B = K^T packed by transform(trans), C fp32 [rows][keys]
//   dnnl pv  brgemm M = rows, N = 64 dims per call, K = keys, A = P rows (bf16), B = V packed by
//            transform(no_trans), add_C: C fp32 [rows][D] += P V
// and, once per round, each side's packing of K and V (fa4: pack_k + pack_v; oneDNN: the
// transforms). Errors: max |x - ref| / max |ref| against an fp64 product of the same bf16 values.
// Rates: 2 * rows * keys * D flops per product.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cpu/cpu_kernels.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "oneapi/dnnl/dnnl_ukernel.hpp"

using namespace fa4::core::cpu;
using fa4::DType;
namespace uk = dnnl::ukernel;
using dt = dnnl::memory::data_type;

namespace {

uint16_t to_bf16(float x) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds per call of f, from batches of calls lasting about `ms` each (one batch; the caller
// takes the median over rounds).
double time_per_call(const std::function<void()>& f, int reps) {
  const double t0 = now_s();
  for (int r = 0; r < reps; ++r) f();
  return (now_s() - t0) / reps;
}
int calibrate(const std::function<void()>& f, double ms) {
  int reps = 1;
  for (;;) {
    const double t = time_per_call(f, reps) * reps;
    if (t > ms * 1e-3 / 4 || reps > (1 << 24)) return std::max(1, static_cast<int>(reps * (ms * 1e-3) / t));
    reps *= 4;
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Core clock estimate: a chain of dependent 1-cycle adds.
double clock_ghz() {
  const long n = 200000000;
  std::vector<double> est;
  for (int i = 0; i < 5; ++i) {
    long x = 0;
    const double t0 = now_s();
    for (long k = 0; k < n; k += 8)
      asm volatile(
          "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
          "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
          : "+r"(x));
    est.push_back(n / (now_s() - t0) / 1e9);
  }
  return median(est);
}

// vdpbf16ps peak: 12 independent zmm accumulators in registers (inline asm, so none is spilled),
// 64 flops per instruction.
double vdpbf16ps_gflops() {
  const long iters = 20000000;
  const double t0 = now_s();
  for (long k = 0; k < iters; ++k)
    asm volatile(
        "vdpbf16ps %%zmm12, %%zmm13, %%zmm0\n\tvdpbf16ps %%zmm12, %%zmm13, %%zmm1\n\t"
        "vdpbf16ps %%zmm12, %%zmm13, %%zmm2\n\tvdpbf16ps %%zmm12, %%zmm13, %%zmm3\n\t"
        "vdpbf16ps %%zmm12, %%zmm13, %%zmm4\n\tvdpbf16ps %%zmm12, %%zmm13, %%zmm5\n\t"
        "vdpbf16ps %%zmm12, %%zmm13, %%zmm6\n\tvdpbf16ps %%zmm12, %%zmm13, %%zmm7\n\t"
        "vdpbf16ps %%zmm12, %%zmm13, %%zmm8\n\tvdpbf16ps %%zmm12, %%zmm13, %%zmm9\n\t"
        "vdpbf16ps %%zmm12, %%zmm13, %%zmm10\n\tvdpbf16ps %%zmm12, %%zmm13, %%zmm11" ::
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11");
  return iters * 12.0 * 64.0 / (now_s() - t0) / 1e9;
}

struct Err {
  double max_abs = 0, max_ref = 0;
  double rel() const { return max_ref > 0 ? max_abs / max_ref : max_abs; }
  void add(double x, double ref) {
    max_abs = std::max(max_abs, std::fabs(x - ref));
    max_ref = std::max(max_ref, std::fabs(ref));
  }
};

struct Result {
  std::vector<double> t_fa4_qk, t_fa4_pv, t_dnnl_qk, t_dnnl_pv, t_fa4_pack, t_dnnl_pack;
  Err e_fa4_qk, e_fa4_pv, e_dnnl_qk, e_dnnl_pv;
};

void* aligned(size_t bytes) { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }

// One (table, rows, keys, D) case, `rounds` interleaved rounds.
Result run_case(const LowpKernels& L, int64_t M, int64_t NK, int64_t D, int rounds, double ms, std::mt19937& rng) {
  Result res;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  // Inputs, bf16 values (Q, K, V ~ N(0, 1); P in [0, 1]).
  std::vector<uint16_t> q(M * D), k(NK * D), v(NK * D), p(M * NK);
  for (auto& x : q) x = to_bf16(nd(rng));
  for (auto& x : k) x = to_bf16(nd(rng));
  for (auto& x : v) x = to_bf16(nd(rng));
  for (auto& x : p) x = to_bf16(ud(rng));
  // fp64 references: S = Q K^T [M][NK], O = P V [M][D] (O starts at 0).
  std::vector<double> s_ref(M * NK), o_ref(M * D);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < NK; ++j) {
      double a = 0;
      for (int64_t d = 0; d < D; ++d) a += double(from_bf16(q[i * D + d])) * from_bf16(k[j * D + d]);
      s_ref[i * NK + j] = a;
    }
  for (int64_t i = 0; i < M; ++i)
    for (int64_t e = 0; e < D; ++e) {
      double a = 0;
      for (int64_t j = 0; j < NK; ++j) a += double(from_bf16(p[i * NK + j])) * from_bf16(v[j * D + e]);
      o_ref[i * D + e] = a;
    }

  // ---- fa4 ----
  const int64_t mp = M, dqk_p = (D + 31) / 32 * 32, nk_p = (NK + 31) / 32 * 32, dv_p = (D + 15) / 16 * 16;
  std::vector<const void*> qrows(M), krows(NK), vrows(NK);
  for (int64_t i = 0; i < M; ++i) qrows[i] = &q[i * D];
  for (int64_t j = 0; j < NK; ++j) krows[j] = &k[j * D], vrows[j] = &v[j * D];
  auto* qv = static_cast<uint16_t*>(aligned(2 * dqk_p * mp));
  auto* kb = static_cast<uint16_t*>(aligned(2 * nk_p * dqk_p));
  auto* vt = static_cast<uint16_t*>(aligned(2 * dv_p * nk_p));
  auto* pp = static_cast<uint16_t*>(aligned(4 * nk_p * M));
  auto* st = static_cast<float*>(aligned(4 * (nk_p + 16) * mp));
  auto* pt = static_cast<float*>(aligned(4 * nk_p * mp));
  auto* ot = static_cast<float*>(aligned(4 * dv_p * mp));
  std::vector<float> alpha(mp, 1.0f);
  if (L.pack_q_rows(qrows.data(), DType::bfloat16, M, mp, D, 1.0f, 1, qv) != 0) std::puts("fa4: pack_q flags");
  auto fa4_pack = [&] {
    L.pack_k(krows.data(), DType::bfloat16, NK, D, 1, kb);
    L.pack_v(vrows.data(), DType::bfloat16, NK, D, 1, vt);
  };
  fa4_pack();
  for (int64_t j = 0; j < nk_p; ++j)
    for (int64_t i = 0; i < mp; ++i) pt[j * mp + i] = j < NK ? from_bf16(p[i * NK + j]) : 0.0f;
  pack_p_avx512(pt, mp, M, NK, 1, pp);  // P^T pairs, as the softmax step writes them
  auto fa4_qk = [&] { L.qk(qv, mp, M, D, kb, nk_p, NK, 1, 1.0f, st); };
  auto fa4_pv = [&] { L.pv(nullptr, mp, M, NK, vt, nk_p, D, 1, alpha.data(), pp, ot); };

  // ---- oneDNN ukernel brgemm ----
  const int64_t nb_s = NK % 64 == 0 ? 64 : 32;  // keys per S call (transform's out_ld: 16..64)
  const int64_t nb_o = D % 64 == 0 ? 64 : 32;   // dims per O call
  const int64_t d_pad = (D + 1) / 2 * 2, nk_pad = (NK + 1) / 2 * 2;
  uk::brgemm bs(M, nb_s, D, 1, D, nb_s, NK, dt::bf16, dt::bf16, dt::f32);
  bs.set_add_C(false);
  if (!bs.finalize()) std::puts("dnnl: finalize S failed");
  bs.generate();
  uk::brgemm bo(M, nb_o, NK, 1, NK, nb_o, D, dt::bf16, dt::bf16, dt::f32);
  bo.set_add_C(true);
  if (!bo.finalize()) std::puts("dnnl: finalize O failed");
  bo.generate();
  // B of S = K^T (D x NK): K's rows are B's columns, "trans" with in_ld = D; one packed block of
  // d_pad x nb_s per call. B of O = V (NK x D): "no_trans", in_ld = D, blocks of nk_pad x nb_o.
  uk::transform tk(D, nb_s, uk::pack_type::trans, D, nb_s, dt::bf16, dt::bf16);
  tk.generate();
  uk::transform tv(NK, nb_o, uk::pack_type::no_trans, D, nb_o, dt::bf16, dt::bf16);
  tv.generate();
  const int64_t blk_k = d_pad * nb_s, blk_v = nk_pad * nb_o;
  auto* kpk = static_cast<uint16_t*>(aligned(2 * blk_k * (NK / nb_s)));
  auto* vpk = static_cast<uint16_t*>(aligned(2 * blk_v * (D / nb_o)));
  auto* cs = static_cast<float*>(aligned(4 * M * NK));
  auto* co = static_cast<float*>(aligned(4 * M * D));
  std::vector<uint8_t> scratch(std::max(bs.get_scratchpad_size(), bo.get_scratchpad_size()) + 64);
  auto dnnl_pack = [&] {
    for (int64_t b = 0; b < NK / nb_s; ++b) tk.execute(&k[b * nb_s * D], kpk + b * blk_k);
    for (int64_t b = 0; b < D / nb_o; ++b) tv.execute(&v[b * nb_o], vpk + b * blk_v);
  };
  dnnl_pack();
  const std::vector<std::pair<dnnl::memory::dim, dnnl::memory::dim>> off0{{0, 0}};
  auto dnnl_qk = [&] {
    for (int64_t b = 0; b < NK / nb_s; ++b) bs.execute(q.data(), kpk + b * blk_k, off0, cs + b * nb_s, scratch.data());
  };
  auto dnnl_pv = [&] {
    for (int64_t b = 0; b < D / nb_o; ++b) bo.execute(p.data(), vpk + b * blk_v, off0, co + b * nb_o, scratch.data());
  };

  // ---- accuracy (one call each from O = 0) ----
  if (L.begin) L.begin();
  std::fill(ot, ot + dv_p * mp, 0.0f);
  fa4_qk();
  fa4_pv();
  if (L.end) L.end();
  bs.set_hw_context();
  std::fill(co, co + M * D, 0.0f);
  dnnl_qk();
  dnnl_pv();
  uk::brgemm::release_hw_context();
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < NK; ++j) {
      res.e_fa4_qk.add(st[j * mp + i], s_ref[i * NK + j]);
      res.e_dnnl_qk.add(cs[i * NK + j], s_ref[i * NK + j]);
    }
    for (int64_t e = 0; e < D; ++e) {
      res.e_fa4_pv.add(ot[e * mp + i], o_ref[i * D + e]);
      res.e_dnnl_pv.add(co[i * D + e], o_ref[i * D + e]);
    }
  }

  // ---- timing: interleaved rounds (order alternates), each batch ~ms ----
  auto fa4_batch = [&](const std::function<void()>& f, int reps) {
    if (L.begin) L.begin();
    const double t = time_per_call(f, reps);
    if (L.end) L.end();
    return t;
  };
  auto dnnl_batch = [&](uk::brgemm& b, const std::function<void()>& f, int reps) {
    b.set_hw_context();
    const double t = time_per_call(f, reps);
    uk::brgemm::release_hw_context();
    return t;
  };
  if (L.begin) L.begin();
  const int r_fqk = calibrate(fa4_qk, ms), r_fpv = calibrate(fa4_pv, ms);
  if (L.end) L.end();
  bs.set_hw_context();
  const int r_dqk = calibrate(dnnl_qk, ms);
  bo.set_hw_context();
  const int r_dpv = calibrate(dnnl_pv, ms);
  uk::brgemm::release_hw_context();
  const int r_fpk = calibrate(fa4_pack, ms), r_dpk = calibrate(dnnl_pack, ms);
  for (int r = 0; r < rounds; ++r) {
    if (r % 2 == 0) {
      res.t_fa4_qk.push_back(fa4_batch(fa4_qk, r_fqk));
      res.t_dnnl_qk.push_back(dnnl_batch(bs, dnnl_qk, r_dqk));
      res.t_fa4_pv.push_back(fa4_batch(fa4_pv, r_fpv));
      res.t_dnnl_pv.push_back(dnnl_batch(bo, dnnl_pv, r_dpv));
      res.t_fa4_pack.push_back(time_per_call(fa4_pack, r_fpk));
      res.t_dnnl_pack.push_back(time_per_call(dnnl_pack, r_dpk));
    } else {
      res.t_dnnl_qk.push_back(dnnl_batch(bs, dnnl_qk, r_dqk));
      res.t_fa4_qk.push_back(fa4_batch(fa4_qk, r_fqk));
      res.t_dnnl_pv.push_back(dnnl_batch(bo, dnnl_pv, r_dpv));
      res.t_fa4_pv.push_back(fa4_batch(fa4_pv, r_fpv));
      res.t_dnnl_pack.push_back(time_per_call(dnnl_pack, r_dpk));
      res.t_fa4_pack.push_back(time_per_call(fa4_pack, r_fpk));
    }
  }
  for (void* x : {(void*)qv, (void*)kb, (void*)vt, (void*)pp, (void*)st, (void*)pt, (void*)ot, (void*)kpk, (void*)vpk,
                  (void*)cs, (void*)co})
    std::free(x);
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  const double ms = argc > 2 ? std::atof(argv[2]) : 20.0;
  const dnnl_version_t* ver = dnnl_version();
  std::printf("oneDNN %d.%d.%d (%s), effective ISA 0x%x (0xe7 avx512_core_bf16, 0xfef amx), ukernel B pack type bf16: %d (3 = pack32)\n", ver->major,
              ver->minor, ver->patch, ver->hash, static_cast<int>(dnnl::get_effective_cpu_isa()),
              static_cast<int>(uk::brgemm::get_B_pack_type(dt::bf16, dt::bf16)));
  const double ghz = clock_ghz();
  const bool amx = amx_usable();
  const bool bf16 = __builtin_cpu_supports("avx512bf16");
  const double vdp = bf16 ? vdpbf16ps_gflops() : 0.0;
  std::printf("clock ~%.2f GHz (dependent adds); vdpbf16ps peak %.1f GFLOP/s (%.1f flop/cycle); amx usable: %s\n",
              ghz, vdp, vdp / ghz, amx ? "yes" : "no");
  if (amx)
    std::printf("AMX peak assumed: one tdpbf16ps (16x16x32 MACs) per 16 cycles = 1024 flop/cycle = %.0f GFLOP/s\n",
                1024 * ghz);
  struct Table {
    const char* name;
    const LowpKernels* L;
    double peak;
  };
  std::vector<Table> tables;
  if (amx) tables.push_back({"amx", amx_kernels().lowp_bf16, 1024 * ghz});
  if (bf16) tables.push_back({"avx512", avx512_kernels(true).lowp_bf16, vdp});
  if (tables.empty()) {
    std::puts("no 16-bit fa4 table on this CPU (needs AMX-BF16 or AVX512_BF16)");
    return 1;
  }
  std::mt19937 rng(1234);
  std::printf(
      "\n| fa4 table | rows x keys | D | product | fa4 GFLOP/s | oneDNN GFLOP/s | oneDNN / fa4 | fa4 %% peak | "
      "oneDNN %% peak | fa4 err | oneDNN err |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::string> packs;
  for (const Table& t : tables) {
    // The backend's tile on this table (amx: 96 x 512; avx512: 192 x 32), and 96 x 512 on avx512
    // too (the AMX table's shape, for brgemm's longer N / K).
    std::vector<std::pair<int64_t, int64_t>> shapes{{t.L->tile_rows > 0 ? t.L->tile_rows : 192, t.L->key_tile}};
    if (std::string(t.name) != "amx") shapes.push_back({96, 512});
    for (auto [M, NK] : shapes)
      for (int64_t D : {64, 128, 256}) {
        Result r = run_case(*t.L, M, NK, D, rounds, ms, rng);
        const double fl = 2.0 * M * NK * D;
        auto row = [&](const char* prod, const std::vector<double>& tf, const std::vector<double>& td, const Err& ef,
                       const Err& ed) {
          const double gf = fl / median(tf) / 1e9, gd = fl / median(td) / 1e9;
          std::printf("| %s | %lld x %lld | %lld | %s | %.1f | %.1f | %.2f | %.0f%% | %.0f%% | %.1e | %.1e |\n", t.name,
                      (long long)M, (long long)NK, (long long)D, prod, gf, gd, gd / gf, 100 * gf / t.peak,
                      100 * gd / t.peak, ef.rel(), ed.rel());
        };
        row("S = Q K^T", r.t_fa4_qk, r.t_dnnl_qk, r.e_fa4_qk, r.e_dnnl_qk);
        row("O += P V", r.t_fa4_pv, r.t_dnnl_pv, r.e_fa4_pv, r.e_dnnl_pv);
        std::fflush(stdout);
        char buf[256];
        std::snprintf(buf, sizeof buf, "| %s | %lld x %lld | %lld | %.2f | %.2f |", t.name, (long long)M, (long long)NK,
                      (long long)D, median(r.t_fa4_pack) * 1e6, median(r.t_dnnl_pack) * 1e6);
        packs.push_back(buf);
      }
  }
  std::printf("\nPacking K and V of the tile (us; fa4 pack_k + pack_v, oneDNN transform of K^T and V):\n\n"
              "| fa4 table | rows x keys | D | fa4 us | oneDNN us |\n|---|---|---|---|---|\n");
  for (auto& s : packs) std::puts(s.c_str());
  std::printf("\nafter: clock ~%.2f GHz; vdpbf16ps peak %.1f GFLOP/s\n", clock_ghz(), bf16 ? vdpbf16ps_gflops() : 0.0);
  return 0;
}
