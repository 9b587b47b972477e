// fa4 info: what this build and machine can run.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "args.h"
#include "commands.h"
#include "sysinfo.h"

namespace fa4cli {
namespace {

const std::vector<OptSpec>& info_options() {
  static const std::vector<OptSpec> t = {
      {"--help", 'h', ArgKind::flag, "", "this help"},
  };
  return t;
}

}  // namespace

std::string info_help() {
  return "usage: fa4 info\n"
         "\n"
         "Prints the fa4 version, each backend with its availability and detail, the CPU and its\n"
         "features, and the thread counts the cpu backend will use.\n"
         "\n"
         "options:\n" +
         format_options(info_options());
}

int cmd_info(int argc, char** argv, int first) {
  if (wants_help(argc, argv, first)) {
    std::fputs(info_help().c_str(), stdout);
    return kExitOk;
  }
  parse_args(info_options(), argc, argv, first);
  std::printf("fa4 %s\n", fa4::version());
#if defined(__clang__)
  std::printf("compiler: clang %s\n", __clang_version__);
#elif defined(__GNUC__)
  std::printf("compiler: gcc %s\n", __VERSION__);
#endif
  std::printf("backends:\n");
  for (const fa4::BackendInfo& b : fa4::backend_info())
    std::printf("  %-10s %-13s %s\n", fa4::backend_name(b.backend), b.available ? "available" : "unavailable",
                b.detail.c_str());
  std::printf("cpu: %s\n", cpu_model().c_str());
  std::printf("cpu features: %s\n", cpu_features().c_str());
  const char* omp_env = std::getenv("OMP_NUM_THREADS");
  std::printf("threads: %d hardware, %d OpenMP (OMP_NUM_THREADS=%s)\n", hardware_threads(), openmp_threads(),
              omp_env ? omp_env : "unset");
  return kExitOk;
}

}  // namespace fa4cli
