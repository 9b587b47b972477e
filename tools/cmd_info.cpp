// fa4 info: what this build and machine can run.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "output.h"
#include "sysinfo.h"

namespace fa4cli {
namespace {

const std::vector<OptSpec>& info_options() {
  static const std::vector<OptSpec> t = {
      {"--json", 0, ArgKind::flag, "", "print the same as one JSON object on stdout"},
      {"--help", 'h', ArgKind::flag, "", "this help"},
  };
  return t;
}

}  // namespace

std::string info_help() {
  return "usage: fa4 info [--json]\n"
         "\n"
         "Prints the fa4 version, each backend with its availability and detail, the CPU and its\n"
         "features, and the thread counts the cpu backend will use. --json: the same as one JSON\n"
         "object (version, compiler, backends [{name, available, detail}], cpu, cpu_features,\n"
         "threads {hardware, openmp, omp_num_threads}) for scripts.\n"
         "\n"
         "options:\n" +
         format_options(info_options());
}

int cmd_info(int argc, char** argv, int first) {
  if (wants_help(argc, argv, first)) {
    std::fputs(info_help().c_str(), stdout);
    return kExitOk;
  }
  const ParsedArgs a = parse_args(info_options(), argc, argv, first);
  const char* omp_env = std::getenv("OMP_NUM_THREADS");
#if defined(__clang__)
  const std::string compiler = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  const std::string compiler = std::string("gcc ") + __VERSION__;
#else
  const std::string compiler = "unknown";
#endif
  if (a.flag("--json")) {
    std::string j = "{\n  \"version\": \"" + json_escape(fa4::version()) + "\",\n  \"compiler\": \"" +
                    json_escape(compiler) + "\",\n  \"backends\": [";
    bool first_b = true;
    for (const fa4::BackendInfo& b : fa4::backend_info()) {
      j += std::string(first_b ? "\n" : ",\n") + "    {\"name\": \"" + json_escape(fa4::backend_name(b.backend)) +
           "\", \"available\": " + (b.available ? "true" : "false") + ", \"detail\": \"" + json_escape(b.detail) +
           "\"}";
      first_b = false;
    }
    j += "\n  ],\n  \"cpu\": \"" + json_escape(cpu_model()) + "\",\n  \"cpu_features\": \"" +
         json_escape(cpu_features()) + "\",\n  \"threads\": {\"hardware\": " + std::to_string(hardware_threads()) +
         ", \"openmp\": " + std::to_string(openmp_threads()) + ", \"omp_num_threads\": " +
         (omp_env ? "\"" + json_escape(omp_env) + "\"" : std::string("null")) + "}\n}\n";
    std::fputs(j.c_str(), stdout);
    return kExitOk;
  }
  std::printf("fa4 %s\n", fa4::version());
  std::printf("compiler: %s\n", compiler.c_str());
  std::printf("backends:\n");
  for (const fa4::BackendInfo& b : fa4::backend_info())
    std::printf("  %-10s %-13s %s\n", fa4::backend_name(b.backend), b.available ? "available" : "unavailable",
                b.detail.c_str());
  std::printf("cpu: %s\n", cpu_model().c_str());
  std::printf("cpu features: %s\n", cpu_features().c_str());
  std::printf("threads: %d hardware, %d OpenMP (OMP_NUM_THREADS=%s)\n", hardware_threads(), openmp_threads(),
              omp_env ? omp_env : "unset");
  return kExitOk;
}

}  // namespace fa4cli
