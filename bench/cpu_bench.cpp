// fa4_cpu_bench: the cpu backend next to the machine's BLAS sgemm rate, measured in the same run
// (DESIGN.md §5, CPU). Speed claims are the ratios; absolute numbers move with the machine and
// with whatever else runs on it.
//
//   fa4_cpu_bench [--reps=N] [--threads=N]
//
// Cases (random normal inputs, never zeros):
//   sgemm       C = A B, 2048^3 fp32 (OpenBLAS, all cores)          FLOPs 2 M N K
//               measured before and after the attention cases, the better rate is the reference
//   prefill     B=1 H=16 S=2048 D=128, bf16 and fp32, causal no/yes FLOPs 4 B H Sq Sk D, causal
//               counts only visible pairs (about half)
//   decode      Sq=1, B=8 Hq=32 Hkv=8 Sk=4096 D=128 bf16             GB/s of K+V bytes read
//               Sq=1, B=1 Hq=8 Hkv=1 Sk=65536 (one unit of work: split-KV spreads it over cores)
//
// Two clocks, best of --reps runs each after one warm-up:
//   wall      the number that matters on a quiet machine;
//   cpu       FLOPs per second of CPU time consumed by the process, times the thread count: what
//             the wall rate would be if every thread had its core to itself. On a shared machine
//             (other jobs competing for the cores) the wall rates of both sgemm and fa4 drop
//             erratically; the cpu-time rates and their ratio stay close to the quiet-machine
//             values (spin-waiting threads count as busy, so they are slightly pessimistic).
// Takes well under a minute on a 2-core machine.
#include <cblas.h>
#include <omp.h>
#include <time.h>

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

int g_reps = 5;
int g_threads = 0;  // fa4 threads (0 = all)

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct Timing {
  double wall = 1e30, cpu = 1e30;  // best seconds on each clock
};

template <class F>
Timing best_of(F&& f) {
  f();  // warm-up: page faults, thread pool start, caches
  Timing best;
  for (int r = 0; r < g_reps; ++r) {
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best.wall = std::min(best.wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    best.cpu = std::min(best.cpu, cpu_seconds() - c0);
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
  double flops, bytes;  // bytes > 0: report K+V GB/s
  Timing t;
  int threads;          // threads the timed code used (turns cpu time into a per-machine rate)
  double wall_gflops() const { return flops / t.wall / 1e9; }
  double cpu_gflops() const { return flops / t.cpu * threads / 1e9; }
};

Row sgemm_row() {
  const int n = 2048;
  const std::vector<float> a = random_floats(size_t(n) * n, 1), b = random_floats(size_t(n) * n, 2);
  std::vector<float> c(size_t(n) * n);
  const Timing t = best_of([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
  return {"sgemm (OpenBLAS)", "2048^3 fp32", 2.0 * n * n * double(n), 0.0, t, openblas_get_num_threads()};
}

Row attention_row(const char* name, fa4::DType dt, int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D,
                  bool causal) {
  Buffer q(dt, {B, Sq, Hq, D}, 11), k(dt, {B, Sk, Hkv, D}, 12), v(dt, {B, Sk, Hkv, D}, 13), o(dt, {B, Sq, Hq, D}, 14);
  fa4::AttentionParams p;
  p.q = q.view;
  p.k = k.view;
  p.v = v.view;
  p.out = o.view;
  p.causal = causal;
  p.backend = fa4::Backend::cpu;
  p.num_threads = g_threads;
  const Timing t = best_of([&] {
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
  char shape[128];
  std::snprintf(shape, sizeof shape, "B=%ld Hq=%ld Hkv=%ld Sq=%ld Sk=%ld D=%ld %s%s", long(B), long(Hq), long(Hkv),
                long(Sq), long(Sk), long(D), fa4::dtype_name(dt), causal ? " causal" : "");
  const double kv_bytes = Sq == 1 ? 2.0 * B * Hkv * Sk * D * fa4::dtype_size(dt) : 0.0;
  return {name, shape, 4.0 * B * Hq * pairs * D, kv_bytes, t, g_threads > 0 ? g_threads : omp_get_max_threads()};
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
      std::fprintf(stderr, "usage: %s [--reps=N] [--threads=N]   (OpenBLAS threads: OPENBLAS_NUM_THREADS)\n", argv[0]);
      return 2;
    }
  }
  std::string fa4_cpu = "?";
  for (const auto& b : fa4::backend_info())
    if (b.backend == fa4::Backend::cpu) fa4_cpu = b.detail;
  std::printf("machine : %s, %d logical cores (omp_get_max_threads)\n", cpu_model().c_str(), omp_get_max_threads());
  std::printf("fa4 cpu : %s; threads requested %d (0 = all)\n", fa4_cpu.c_str(), g_threads);
  std::printf("openblas: %s, %d threads\n", openblas_get_config(), openblas_get_num_threads());
  std::printf("timing  : best of %d after 1 warm-up, wall clock and process cpu time (see the source)\n", g_reps);

  using fa4::DType;
  const Row sgemm_before = sgemm_row();
  std::vector<Row> rows;
  rows.push_back(attention_row("prefill", DType::bfloat16, 1, 16, 16, 2048, 2048, 128, false));
  rows.push_back(attention_row("prefill", DType::bfloat16, 1, 16, 16, 2048, 2048, 128, true));
  rows.push_back(attention_row("prefill", DType::float32, 1, 16, 16, 2048, 2048, 128, false));
  rows.push_back(attention_row("prefill", DType::float32, 1, 16, 16, 2048, 2048, 128, true));
  rows.push_back(attention_row("prefill D=64", DType::bfloat16, 1, 32, 32, 2048, 2048, 64, false));
  rows.push_back(attention_row("decode", DType::bfloat16, 8, 32, 8, 1, 4096, 128, false));
  rows.push_back(attention_row("decode split-KV", DType::bfloat16, 1, 8, 1, 1, 65536, 128, false));
  const Row sgemm_after = sgemm_row();
  // The better sgemm of the two on each clock is the reference, so a load spike during one of
  // them cannot flatter the ratios.
  Row sgemm = sgemm_before;
  sgemm.t.wall = std::min(sgemm_before.t.wall, sgemm_after.t.wall);
  sgemm.t.cpu = std::min(sgemm_before.t.cpu, sgemm_after.t.cpu);
  std::printf("sgemm   : wall GFLOP/s before / after the attention cases %.1f / %.1f\n\n", sgemm_before.wall_gflops(),
              sgemm_after.wall_gflops());
  rows.insert(rows.begin(), sgemm);

  std::printf("%-16s %-50s %9s %9s %7s %9s %7s %8s\n", "case", "shape", "wall ms", "GFLOP/s", "x sgemm", "cpu GF/s",
              "x sgemm", "KV GB/s");
  for (const Row& r : rows) {
    std::printf("%-16s %-50s %9.2f %9.1f %7.2f %9.1f %7.2f", r.name.c_str(), r.shape.c_str(), r.t.wall * 1e3,
                r.wall_gflops(), r.wall_gflops() / sgemm.wall_gflops(), r.cpu_gflops(),
                r.cpu_gflops() / sgemm.cpu_gflops());
    if (r.bytes > 0) std::printf(" %8.2f", r.bytes / r.t.wall / 1e9);
    std::printf("\n");
  }
  // Causal / non-causal time (ideal ~0.5: half the score matrix is visible).
  std::printf("\ncausal/non-causal time (wall): bf16 %.2f, fp32 %.2f\n", rows[2].t.wall / rows[1].t.wall,
              rows[4].t.wall / rows[3].t.wall);
  return 0;
}
