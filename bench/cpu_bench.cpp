// fa4_cpu_bench: the cpu backend next to the machine's BLAS sgemm rate, measured in the same run
// (DESIGN.md §5, CPU). Speed claims are the ratios; absolute numbers move with the machine and
// with whatever else runs on it, so every time is the best of --reps runs after one warm-up.
//
//   fa4_cpu_bench [--reps=N] [--threads=N]
//
// Cases (random normal inputs, never zeros):
//   sgemm       C = A B, 2048^3 fp32 (OpenBLAS, all cores)          FLOPs 2 M N K
//               measured before and after the attention cases, the better rate is the reference
//   prefill     B=1 H=16 S=2048 D=128, bf16 and fp32, causal no/yes FLOPs 4 B H Sq Sk D, causal / 2
//   decode      Sq=1, B=8 Hq=32 Hkv=8 Sk=4096 D=128 bf16             GB/s of K+V bytes read
//               Sq=1, B=1 Hq=8 Hkv=1 Sk=65536 (one unit of work: split-KV spreads it over cores)
// Takes well under a minute on a 2-core machine.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "fa4/fa4.h"

namespace {

using Clock = std::chrono::steady_clock;

int g_reps = 5;
int g_threads = 0;

template <class F>
double best_seconds(F&& f) {
  f();  // warm-up: page faults, thread pool start, caches
  double best = 1e30;
  for (int r = 0; r < g_reps; ++r) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

uint16_t to_bf16(float f) {  // round to nearest even (inputs are finite)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// A host tensor in bf16 or fp32 filled with N(0, 1).
struct Buffer {
  std::vector<unsigned char> mem;
  fa4::TensorView view;
  Buffer(fa4::DType dt, std::initializer_list<int64_t> shape, uint64_t seed) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    mem.resize(static_cast<size_t>(n) * fa4::dtype_size(dt));
    const std::vector<float> f = random_floats(static_cast<size_t>(n), seed);
    if (dt == fa4::DType::bfloat16) {
      auto* p = reinterpret_cast<uint16_t*>(mem.data());
      for (int64_t i = 0; i < n; ++i) p[i] = to_bf16(f[i]);
    } else {
      std::memcpy(mem.data(), f.data(), f.size() * 4);
    }
    view = fa4::TensorView::contiguous(mem.data(), dt, shape);
  }
};

struct Row {
  std::string name, shape;
  double seconds, gflops, gbs;
};

double sgemm_gflops() {
  const int n = 2048;
  const std::vector<float> a = random_floats(size_t(n) * n, 1), b = random_floats(size_t(n) * n, 2);
  std::vector<float> c(size_t(n) * n);
  const double t = best_seconds([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
  return 2.0 * n * n * double(n) / t / 1e9;
}

void attention_case(std::vector<Row>& rows, const char* name, fa4::DType dt, int64_t B, int64_t Hq, int64_t Hkv,
                    int64_t Sq, int64_t Sk, int64_t D, bool causal) {
  Buffer q(dt, {B, Sq, Hq, D}, 11), k(dt, {B, Sk, Hkv, D}, 12), v(dt, {B, Sk, Hkv, D}, 13), o(dt, {B, Sq, Hq, D}, 14);
  fa4::AttentionParams p;
  p.q = q.view;
  p.k = k.view;
  p.v = v.view;
  p.out = o.view;
  p.causal = causal;
  p.backend = fa4::Backend::cpu;
  p.num_threads = g_threads;
  const double t = best_seconds([&] {
    const fa4::Status st = fa4::attention_forward(p);
    if (!st) {
      std::fprintf(stderr, "attention_forward failed: %s\n", st.message.c_str());
      std::exit(1);
    }
  });
  // Visible (query, key) pairs: bottom-right causal sees Sk - Sq + i + 1 keys at row i.
  double pairs = double(Sq) * Sk;
  if (causal) {
    pairs = 0;
    for (int64_t i = 0; i < Sq; ++i) pairs += double(std::min<int64_t>(Sk, Sk - Sq + i + 1));
  }
  const double flops = 4.0 * B * Hq * pairs * D;
  const double kv_bytes = 2.0 * B * Hkv * Sk * D * fa4::dtype_size(dt);
  char shape[128];
  std::snprintf(shape, sizeof shape, "B=%ld Hq=%ld Hkv=%ld Sq=%ld Sk=%ld D=%ld %s%s", long(B), long(Hq), long(Hkv),
                long(Sq), long(Sk), long(D), fa4::dtype_name(dt), causal ? " causal" : "");
  rows.push_back({name, shape, t, flops / t / 1e9, Sq == 1 ? kv_bytes / t / 1e9 : 0.0});
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) g_reps = std::max(1, std::atoi(argv[i] + 7));
    else if (std::strncmp(argv[i], "--threads=", 10) == 0) g_threads = std::max(0, std::atoi(argv[i] + 10));
    else {
      std::fprintf(stderr, "usage: %s [--reps=N] [--threads=N]\n", argv[0]);
      return 2;
    }
  }
  std::string fa4_cpu = "?";
  for (const auto& b : fa4::backend_info())
    if (b.backend == fa4::Backend::cpu) fa4_cpu = b.detail;
  std::printf("machine : %s, %d logical cores (omp_get_max_threads)\n", cpu_model().c_str(), omp_get_max_threads());
  std::printf("fa4 cpu : %s; threads requested %d (0 = all)\n", fa4_cpu.c_str(), g_threads);
  std::printf("openblas: %s, %d threads\n", openblas_get_config(), openblas_get_num_threads());
  std::printf("timing  : best of %d after 1 warm-up (other load on the machine only slows runs down)\n\n", g_reps);

  std::vector<Row> rows;
  // sgemm before and after the attention cases; the better of the two is the reference rate, so
  // a load spike during one of them cannot flatter the ratios.
  const double sgemm_before = sgemm_gflops();
  using fa4::DType;
  attention_case(rows, "prefill", DType::bfloat16, 1, 16, 16, 2048, 2048, 128, false);
  attention_case(rows, "prefill", DType::bfloat16, 1, 16, 16, 2048, 2048, 128, true);
  attention_case(rows, "prefill", DType::float32, 1, 16, 16, 2048, 2048, 128, false);
  attention_case(rows, "prefill", DType::float32, 1, 16, 16, 2048, 2048, 128, true);
  attention_case(rows, "prefill D=64", DType::bfloat16, 1, 32, 32, 2048, 2048, 64, false);
  attention_case(rows, "decode", DType::bfloat16, 8, 32, 8, 1, 4096, 128, false);
  attention_case(rows, "decode split-KV", DType::bfloat16, 1, 8, 1, 1, 65536, 128, false);

  const double sgemm_after = sgemm_gflops();
  const double sgemm = std::max(sgemm_before, sgemm_after);
  const double n = 2048;
  rows.insert(rows.begin(), Row{"sgemm (OpenBLAS)", "2048^3 fp32", 2 * n * n * n / sgemm / 1e9, sgemm, 0.0});
  std::printf("sgemm GFLOP/s before / after the attention cases: %.1f / %.1f (the better one is used)\n\n",
              sgemm_before, sgemm_after);
  std::printf("%-16s %-52s %9s %9s %8s %8s\n", "case", "shape", "best ms", "GFLOP/s", "x sgemm", "KV GB/s");
  for (const Row& r : rows) {
    std::printf("%-16s %-52s %9.2f %9.1f %8.2f", r.name.c_str(), r.shape.c_str(), r.seconds * 1e3, r.gflops,
                r.gflops / sgemm);
    if (r.gbs > 0) std::printf(" %8.2f", r.gbs);
    std::printf("\n");
  }
  // Causal / non-causal time ratio (ideal ~0.5: half the score matrix is visible).
  std::printf("\ncausal/non-causal time: bf16 %.2f, fp32 %.2f\n", rows[2].seconds / rows[1].seconds,
              rows[4].seconds / rows[3].seconds);
  return 0;
}
