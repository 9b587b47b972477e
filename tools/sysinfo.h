// What the machine is: CPU model and features, thread counts (for `fa4 info` and bench records).
#pragma once

#include <string>

namespace fa4cli {

std::string cpu_model();     // "AMD EPYC" (from /proc/cpuinfo), "unknown" elsewhere
std::string cpu_features();  // "sse4.2 avx avx2 fma f16c" (x86), the architecture otherwise
int hardware_threads();      // std::thread::hardware_concurrency()
int openmp_threads();        // omp_get_max_threads(): what the cpu backend uses by default
std::string utc_now_iso();   // "2026-11-29T07:40:00Z"
std::string host_name();

}  // namespace fa4cli
