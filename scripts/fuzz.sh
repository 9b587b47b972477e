#!/usr/bin/env bash
# Builds the libFuzzer target for the C ABI (tests/fuzz) with clang, ASan and UBSan into
# ./build-fuzz (CPU backends only) and fuzzes it for FUZZ_SECONDS (default 180), seeded with the
# regression corpus tests/fuzz/corpus. Exits non-zero on any finding: the crash / timeout /
# leak file lands in build-fuzz/findings/, and `build-fuzz/tests/fuzz/fa4_fuzzer FILE` replays
# it (fuzz_replay --print FILE shows it as a text seed).
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh      longer run
#   FUZZ_JOBS=2 bash scripts/fuzz.sh           parallel fuzzing processes (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
need=()
command -v clang++ >/dev/null || need+=(clang)
# libFuzzer and the sanitizer runtimes (Debian: libclang-rt-N-dev), OpenMP for clang (libomp).
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >/tmp/fa4_fuzz_probe.cpp
clang++ -fsanitize=fuzzer,address,undefined /tmp/fa4_fuzz_probe.cpp -o /tmp/fa4_fuzz_probe >/dev/null 2>&1 || need+=(libclang-rt-dev)
ls /usr/lib/llvm-*/lib/libomp.so /usr/lib/*/libomp.so >/dev/null 2>&1 || need+=(libomp-dev)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "fa4: installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
jobs=$(nproc 2>/dev/null || echo 2)
# The library is instrumented for coverage (fuzzer-no-link) and both sanitizers; any UBSan
# report aborts, so libFuzzer records it like a crash.
flags="-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFA4_CUDA=OFF -DFA4_FUZZER=ON -DFA4_BUILD_TOOLS=OFF \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build build-fuzz -j"$jobs" --target fa4_fuzzer
secs=${FUZZ_SECONDS:-180}
work=build-fuzz/corpus-work   # new inputs libFuzzer finds (the repository corpus stays read-only)
# findings/ holds this run's reproducers only (an old one would fail the run).
rm -rf build-fuzz/findings
mkdir -p "$work" build-fuzz/findings
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1:abort_on_error=1:symbolize=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "fa4 fuzz: ${secs} s, corpus tests/fuzz/corpus"
# -timeout: one input may take at most 20 s (a hang or work scaled by a claimed size is a
# finding); -rss_limit_mb / -malloc_limit_mb: memory beyond the real work is one too.
# Parallel jobs log to fuzz-N.log in the working directory: keep those out of the tree.
par=()
[ "${FUZZ_JOBS:-1}" -gt 1 ] && par=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS" -close_fd_mask=1)
set +e
# FUZZ_SEED (CI: fixed, so a submission's fuzz run is the one its author ran; 0 = random).
build-fuzz/tests/fuzz/fa4_fuzzer "$work" tests/fuzz/corpus -max_total_time="$secs" -seed="${FUZZ_SEED:-0}" -timeout=20 \
  -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=4096 -print_final_stats=1 \
  -artifact_prefix=build-fuzz/findings/ "${par[@]}" 2>&1 | tail -n 60
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ] || [ -n "$(ls -A build-fuzz/findings 2>/dev/null)" ]; then
  echo "fa4 fuzz: FINDING (exit $rc); reproducers in build-fuzz/findings/:" >&2
  ls -l build-fuzz/findings >&2 || true
  exit 1
fi
echo "fa4 fuzz: no finding in ${secs} s"
