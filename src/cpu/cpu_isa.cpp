// Which kernel table the cpu backend runs: decided once per process from what the CPU reports
// (CPUID), what the OS saves on a context switch (XCR0) and, for AMX on Linux, what the kernel
// grants (arch_prctl). FA4_CPU_ISA=amx|avx512|avx2|generic caps the choice, so tests and
// benchmarks can run every path the machine has; an ISA the machine lacks falls to the best one
// below it (the plan's kernel name says which ran).
//
// This file is compiled for the baseline ISA: it only asks, it never executes the instructions.
#include <cstdlib>
#include <cstring>

#include "cpu/cpu_kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace fa4::core::cpu {
namespace {

enum class Isa { generic = 0, avx2 = 1, avx512 = 2, amx = 3 };

// The FA4_CPU_ISA cap; unset or unknown = no cap.
Isa isa_cap() {
  const char* e = std::getenv("FA4_CPU_ISA");
  if (!e) return Isa::amx;
  if (std::strcmp(e, "generic") == 0) return Isa::generic;
  if (std::strcmp(e, "avx2") == 0) return Isa::avx2;
  if (std::strcmp(e, "avx512") == 0) return Isa::avx512;
  return Isa::amx;
}

#if defined(__x86_64__) || defined(_M_X64)
struct Cpuid {
  unsigned a = 0, b = 0, c = 0, d = 0;
  Cpuid(unsigned leaf, unsigned sub) {
    if (!__get_cpuid_count(leaf, sub, &a, &b, &c, &d)) a = b = c = d = 0;
  }
};

// XCR0: which register state the OS saves (so may be used). Only read when CPUID says OSXSAVE.
unsigned long long xcr0() {
  if (!(Cpuid(1, 0).c & bit_OSXSAVE)) return 0;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

// F16C straight from CPUID leaf 1, ECX bit 29: clang < 15 rejects
// __builtin_cpu_supports("f16c"), and CPUID works with every compiler.
bool has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && (Cpuid(1, 0).c & bit_F16C) != 0;
}

// AVX-512 F + BW + VL + DQ with the ZMM / opmask state saved (XCR0 bits 5-7 plus 1-2).
bool has_avx512() {
  const Cpuid l7(7, 0);
  const bool f = (l7.b & (1u << 16)) != 0, dq = (l7.b & (1u << 17)) != 0, bw = (l7.b & (1u << 30)) != 0,
             vl = (l7.b & (1u << 31)) != 0;
  return has_avx2() && f && dq && bw && vl && (xcr0() & 0xe6) == 0xe6;
}

bool has_avx512_bf16() { return (Cpuid(7, 1).a & (1u << 5)) != 0; }

// Linux keeps AMX tile data (8 KB of state) off by default: a process asks once with
// ARCH_REQ_XCOMP_PERM; without the grant the first tile instruction faults (SIGILL). Other
// systems: XCR0 alone decides.
bool request_amx_permission() {
#if defined(__linux__)
  constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long long perm = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &perm) != 0) return false;
  return (perm & (1ull << kXfeatureXtiledata)) != 0;
#else
  return true;
#endif
}

bool has_amx_hw() {
  const Cpuid l7(7, 0);
  const bool tile = (l7.d & (1u << 24)) != 0, bf16 = (l7.d & (1u << 22)) != 0;
  // XTILECFG (bit 17) and XTILEDATA (bit 18) enabled by the OS.
  return tile && bf16 && has_avx512() && (xcr0() & 0x60000) == 0x60000;
}
#endif

}  // namespace

bool amx_usable() {
#if defined(__x86_64__) || defined(_M_X64)
  static const bool ok = has_amx_hw() && request_amx_permission();
  return ok;
#else
  return false;
#endif
}

const Kernels& best_kernels() {
  static const Kernels* const k = [] {
    const Isa cap = isa_cap();
#if defined(__x86_64__) || defined(_M_X64)
    // The permission request happens only where AMX would run (not under a lower cap).
    if (cap >= Isa::amx && amx_usable()) return &amx_kernels();
    if (cap >= Isa::avx512 && has_avx512()) return &avx512_kernels(has_avx512_bf16());
    if (cap >= Isa::avx2 && has_avx2()) return &avx2_kernels();
#else
    (void)cap;
#endif
    return &generic_kernels();
  }();
  return *k;
}

}  // namespace fa4::core::cpu
