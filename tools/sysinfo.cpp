#include "sysinfo.h"

#include <omp.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace fa4cli {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      const size_t c = line.find(':');
      if (c != std::string::npos) {
        size_t s = line.find_first_not_of(" \t", c + 1);
        return s == std::string::npos ? "unknown" : line.substr(s);
      }
    }
  }
  return "unknown";
}

std::string cpu_features() {
#if defined(__x86_64__) || defined(__i386__)
  std::string f;
  __builtin_cpu_init();
#define FA4_FEATURE(name) \
  if (__builtin_cpu_supports(name)) f += std::string(f.empty() ? "" : " ") + name;
  FA4_FEATURE("sse4.2")
  FA4_FEATURE("avx")
  FA4_FEATURE("avx2")
  FA4_FEATURE("fma")
  {  // clang < 15 rejects __builtin_cpu_supports("f16c"): CPUID leaf 1, ECX bit 29, with any compiler
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C)) f += std::string(f.empty() ? "" : " ") + "f16c";
  }
  FA4_FEATURE("avx512f")
  FA4_FEATURE("avx512bw")
  FA4_FEATURE("avx512vl")
  FA4_FEATURE("avx512bf16")
#undef FA4_FEATURE
  return "x86-64: " + (f.empty() ? std::string("baseline") : f);
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "unknown architecture";
#endif
}

int hardware_threads() { return static_cast<int>(std::thread::hardware_concurrency()); }

int openmp_threads() { return omp_get_max_threads(); }

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace fa4cli
