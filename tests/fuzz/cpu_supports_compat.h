// Forced include for the fuzz build only (scripts/fuzz.sh adds -include when the compiler
// needs it): clang < 15 rejects __builtin_cpu_supports("f16c") ("invalid cpu feature string"),
// which src/cpu/cpu_kernels_generic.cpp uses for its AVX2 dispatch. The macro routes every call
// through a function that answers "f16c" with CPUID and passes the other features on to the
// builtin, so the dispatch (and its AVX2 kernels) stay what they are in the real build.
#pragma once
#if defined(__x86_64__) && defined(__clang__) && __clang_major__ < 15
#include <cpuid.h>
#include <string.h>
static inline int fa4_fuzz_cpu_supports(const char* f) {
  if (strcmp(f, "f16c") == 0) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  }
  if (strcmp(f, "avx2") == 0) return __builtin_cpu_supports("avx2");
  if (strcmp(f, "fma") == 0) return __builtin_cpu_supports("fma");
  if (strcmp(f, "avx512f") == 0) return __builtin_cpu_supports("avx512f");
  return 0;
}
#define __builtin_cpu_supports(f) fa4_fuzz_cpu_supports(f)
#endif
