#!/usr/bin/env bash
# One device call: the cuda test suite, a compute-sanitizer pass (memcheck + racecheck) on a
# reduced set, and the peer benchmark. Full logs go to $OUT; a short summary is printed last.
#
# Build here first (no GPU needed), then stage the binaries that travel (carry build-device-pack):
#   cmake -S . -B build-cuda -DFA4_CUDA=ON -DCMAKE_BUILD_TYPE=Release && make -C build-cuda -j2 fa4 test_cuda test_sm90_ptx
#   bash bench/device_run.sh --stage        # copies them into build-device/ (small enough to carry)
#   bash bench/stage_ab.sh REV NAME          # optional: another revision's libfa4 for --ab (peers.py)
# On the GPU machine (the repo root, build-device-pack/ carried):
#   OUT=/some/dir bash bench/device_run.sh [--quick] [--skip-tests] [--skip-bench] [--bench-args "..."]
#     [--kernels "sm80 sm90"]   the FA4_CUDA_KERNEL values the test suite runs under, once each
#     [--test-bin PATH]         another build's test suite (bench/stage_sm90_variant.sh TESTS=1)
# One device call runs 10 minutes at most, and the parts do not fit in one: the suites take
# ~400 s side by side since the fp8 tests (H100, 2026-12-05), the three sanitizers up to 300 s
# each, the benchmark minutes. Split them: --skip-sanitizer --skip-bench, then --skip-tests
# --skip-bench, then --skip-tests --skip-sanitizer.
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=build-device

if [[ "${1:-}" == "--stage" ]]; then
  rm -rf "$DIR" && mkdir -p "$DIR/lib"
  cp -L build-cuda/libfa4.so "$DIR/lib/libfa4.so"
  cp build-cuda/tests/cuda/test_cuda "$DIR/"
  # sm_90a PTX wrapper tests (optional: staged when built)
  if [[ -f build-cuda/tests/cuda/test_sm90_ptx ]]; then
    cp build-cuda/tests/cuda/test_sm90_ptx "$DIR/" && strip --strip-unneeded "$DIR/test_sm90_ptx"
  else
    echo "note: build-cuda/tests/cuda/test_sm90_ptx not built; not staged"
  fi
  cp -L "$(g++ -print-file-name=libgomp.so.1)" "$DIR/lib/"  # the device image may lack OpenMP's runtime
  git rev-parse --short HEAD > "$DIR/commit"
  strip --strip-unneeded "$DIR/lib/libfa4.so" "$DIR/test_cuda"
  set -- --pack
fi
if [[ "${1:-}" == "--pack" ]]; then
  # The fatbins compress well (xz: a build plus two variants in 28 MB); carry build-device-pack/
  # (the transfer limit is 64 MiB). (bench/stage_ab.sh adds other builds to $DIR/lib and packs again.)
  rm -rf build-device-pack && mkdir -p build-device-pack
  tar cf - "$DIR" | xz -T0 -6 > build-device-pack/bin.txz
  du -sh "$DIR" build-device-pack
  exit 0
fi

QUICK=0 TESTS=1 BENCH=1 SAN=1 BENCH_ARGS="" KERNELS="sm80 sm90" TEST_BIN="$DIR/test_cuda"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --skip-tests) TESTS=0 ;;
    --skip-sanitizer) SAN=0 ;;
    --skip-bench) BENCH=0 ;;
    --bench-args) BENCH_ARGS="$2"; shift ;;
    --kernels) KERNELS="$2"; shift ;;
    --test-bin) TEST_BIN="$2"; shift ;;
  esac
  shift
done
OUT_DEFAULT=/tmp/fa4-device-out source bench/device_env.sh
export PYTHONUNBUFFERED=1
export FA4_COMMIT=$(cat "$DIR/commit" 2>/dev/null || echo unknown)
SUMMARY=()

{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv; } > "$OUT/env.log" 2>&1

if [[ $TESTS == 1 ]]; then
  CASES=$([[ $QUICK == 1 ]] && echo 120 || echo 400)
  # The same suite once per kernel: FA4_CUDA_KERNEL makes the library prefer that kernel wherever
  # it supports a case (the rest takes the automatic choice); the log's last line counts the
  # cases each kernel ran.
  # The suites run side by side (one process per kernel, and the 99 KB emulation): they wait
  # mostly on the host's fp64 references, not on the GPU, and one after another the sm80 + sm90
  # suites ran past 7 minutes (2026-12-03), more than a device call can spare.
  start=$(date +%s)
  declare -A PIDS
  for kernel in $KERNELS; do
    FA4_CUDA_KERNEL=$kernel FA4_CUDA_CASES=$CASES timeout 420 "$TEST_BIN" > "$OUT/tests_$kernel.log" 2>&1 &
    PIDS[$kernel]=$!
  done
  # A 99 KB GPU (sm_86 / sm_89 opt-in per block) emulated by the planner's cap: D = 192 / 256 then
  # run on the compact tile, the other dims on tiles that fit; and a 60,000-byte cap: D = 256
  # must be refused cleanly, D = 64 prefill runs on its decode tile.
  (
    FA4_CUDA_SMEM_OPTIN=101376 FA4_CUDA_CASES=$((CASES / 4)) timeout 300 "$TEST_BIN" \
      --gtest_filter='CudaBackend.RandomVsReference:CudaBackend.PrefillShapes:CudaBackend.WideHeadDecode:CudaBackend.SingleBufferPrefill'
    r=$?
    FA4_CUDA_SMEM_OPTIN=60000 timeout 60 "$TEST_BIN" --gtest_filter='CudaBackend.SharedMemoryCap'
    exit $(( r | $? ))
  ) > "$OUT/tests_99kb.log" 2>&1 &
  PIDS[99kb]=$!
  for kernel in $KERNELS; do
    wait "${PIDS[$kernel]}"
    rc=$?
    SUMMARY+=("tests FA4_CUDA_KERNEL=$kernel ($CASES random cases + fixed sets): rc=$rc, $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests_$kernel.log" | tr '\n' ' ')$(grep -E '^cases per kernel' "$OUT/tests_$kernel.log" | sed 's/^cases per kernel ([^)]*):/; cases per kernel:/')")
  done
  wait "${PIDS[99kb]}"
  rc=$?
  SUMMARY+=("tests as a 99 KB GPU ($((CASES / 4)) random cases + D >= 192 sets): rc=$rc, $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests_99kb.log" | tr '\n' ' ')")
  SUMMARY+=("test suites side by side: $(( $(date +%s) - start )) s")
  if [[ -x "$DIR/test_sm90_ptx" ]]; then
    start=$(date +%s)
    timeout 120 "$DIR/test_sm90_ptx" > "$OUT/sm90_ptx.log" 2>&1
    rc=$?
    SUMMARY+=("sm90 ptx tests: rc=$rc, $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$OUT/sm90_ptx.log" | tr '\n' ' ') ($(( $(date +%s) - start )) s)")
  fi
fi

if [[ $SAN == 1 ]]; then
  # SingleBufferPrefill: D = 256 tiles, whose warp pairs swap P fragments through shared memory
  # (pair_dv) - the one intra-iteration shared-memory exchange racecheck must see. PrefillShapes
  # under FA4_CUDA_KERNEL=sm90: every sm90 instance (D 64 / 128 / 256, padded dims, masks, LSE)
  # with its TMA / mbarrier / named-barrier pipeline; the other tests stay on sm80 / simt there.
  # Fp8SpecialValues: the fp8 (sm80) instances with splits; DecodeGroupsSplitsAndLengths: the
  # sm90 split_kv instance's in-kernel merge (the last split reads the others' rows).
  # LongMaskedSequences / VarlenManySequences: key tails that are not the tensor's end, so a CTA's
  # later tile zeroes its V tail in a ring slot that held the previous tile's O (D 256 stages O
  # over the V ring): 16128 racecheck hazards there until 81ad571 (docs/perf/h200-2026-12-06c-session.md).
  FILTER='CudaBackend.RandomVsReference:CudaBackend.PrefillShapes:CudaBackend.GraphCapture:CudaBackend.CombinePartials:CudaBackend.WorkspaceAllocatorHook:CudaBackend.SingleBufferPrefill:CudaBackend.Fp8SpecialValues:CudaBackend.DecodeGroupsSplitsAndLengths:CudaBackend.LongMaskedSequences:CudaBackend.VarlenManySequences:CudaF32.RandomVsReference'
  for tool in memcheck racecheck synccheck; do
    start=$(date +%s)
    FA4_CUDA_KERNEL=sm90 FA4_CUDA_CASES=6 timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$TEST_BIN" \
      --gtest_filter="$FILTER" > "$OUT/$tool.log" 2>&1
    rc=$?
    SUMMARY+=("compute-sanitizer $tool: rc=$rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | head -1) ($(( $(date +%s) - start )) s)")
  done
fi

if [[ $BENCH == 1 ]]; then
  start=$(date +%s)
  Q=$([[ $QUICK == 1 ]] && echo --quick)
  timeout 540 python3 bench/peers.py --lib "$DIR/lib/libfa4.so" --out "$OUT" $Q $BENCH_ARGS > "$OUT/bench.log" 2>&1
  SUMMARY+=("bench: rc=$? ($(( $(date +%s) - start )) s)")
  # Accuracy against an fp64 reference, fa4 and every installed peer on the same inputs
  start=$(date +%s)
  timeout 240 python3 bench/accuracy.py --lib "$DIR/lib/libfa4.so" --out "$OUT" $Q > "$OUT/accuracy.log" 2>&1
  SUMMARY+=("accuracy: rc=$? ($(( $(date +%s) - start )) s)")
fi

echo "===== failures (first lines) ====="
for kernel in $KERNELS; do
  grep -E "Failure|error|FAILED|Error" "$OUT/tests_$kernel.log" 2>/dev/null | head -15
  grep -B2 -A12 "Failure" "$OUT/tests_$kernel.log" 2>/dev/null | head -60
done
grep -B2 -A12 "Failure" "$OUT/tests_99kb.log" 2>/dev/null | head -40
grep -B2 -A12 "Failure" "$OUT/sm90_ptx.log" 2>/dev/null | head -40
echo "===== bench ====="
[[ -f "$OUT/peers.md" ]] && cat "$OUT/peers.md" || tail -30 "$OUT/bench.log" 2>/dev/null
[[ -f "$OUT/accuracy.md" ]] && { echo "===== accuracy (max-abs / rel-L2 vs fp64) ====="; cat "$OUT/accuracy.md"; }
echo "===== summary ====="
printf '%s\n' "${SUMMARY[@]}"
