#!/usr/bin/env bash
# The fp8-KV decode A/B (issue 15 item 4; docs/perf/h100-2026-12-06-session.md): main
# (the lean converters, bf16 q computed in fp16) against switch builds of
# src/cuda/sm90/fwd_fp8_kv.h / fwd_config.h, in one device call. The tile shapes (key block, 16-bit
# stages, byte stages) were swept on 2026-12-05 while the converters bound the tile ((128, 2, 2)
# won); with the lean converters the H200 still reads e4m3 at ~3.1 TB/s where its bf16 cache reads
# 4.3, so the sweep again (each fits the 227 KB: Q 32 KB + 16-bit ring + byte ring):
#   kvb64   BLOCK_N 64, STAGES 2, BYTE_STAGES 8   (more, smaller byte slots in flight)
#   kvs1    BLOCK_N 128, STAGES 1, BYTE_STAGES 4  (bytes in flight over widened slots)
#   kvb64s3 BLOCK_N 64, STAGES 3, BYTE_STAGES 6
#   kvlean  F16_COMPUTE=0                         bf16 q widened to bf16 (fp16 q unchanged)
# Here (no GPU; the main CUDA build in build-cuda/ first, ~15 min on 2 cores; each variant ~2 min):
#   bash bench/fp8kv_ab.sh --stage     # build-device-pack/ (~50 MB: carry it alone)
# On the device (carry build-device-pack; ~4 min):
#   OUT=/dir bash bench/fp8kv_ab.sh [--no-tests] [--no-ncu]
# The variant tests (TESTED: Sm90Fp8KvDecode + racecheck / synccheck) run after the timings, so
# a call cut short keeps the numbers; the short table of tokens/s fp8 / 16-bit per build is last.
set -uo pipefail
cd "$(dirname "$0")/.."
VARIANTS=(
  "kvb64 -DFA4_SM90_FP8_KV_BLOCK_N=64 -DFA4_SM90_FP8_KV_STAGES=2 -DFA4_SM90_FP8_KV_BYTE_STAGES=8"
  "kvs1 -DFA4_SM90_FP8_KV_STAGES=1 -DFA4_SM90_FP8_KV_BYTE_STAGES=4"
  "kvb64s3 -DFA4_SM90_FP8_KV_BLOCK_N=64 -DFA4_SM90_FP8_KV_STAGES=3 -DFA4_SM90_FP8_KV_BYTE_STAGES=6"
  "kvlean -DFA4_SM90_FP8_KV_F16_COMPUTE=0"
)
TESTED=""  # variants whose device test suite is staged (test_cuda_NAME, ~14 MB packed each)

if [[ "${1:-}" == "--stage" ]]; then
  set -e
  bash bench/device_run.sh --stage > /dev/null
  for v in "${VARIANTS[@]}"; do
    set -- $v
    t=0; [[ " $TESTED " == *" $1 "* ]] && t=1
    TESTS=$t bash bench/stage_sm90_variant.sh "$@" > /dev/null
  done
  # Within the 64 MiB a call carries: the main suite and the ptx tests are not part of this A/B.
  rm -f build-device/test_cuda build-device/test_sm90_ptx
  bash bench/device_run.sh --pack
  exit 0
fi

TESTS=1 NCU=1
for a in "$@"; do
  case "$a" in
    --no-tests) TESTS=0 ;;
    --no-ncu) NCU=0 ;;
    *) echo "fp8kv_ab: unknown argument $a" >&2; exit 2 ;;
  esac
done
OUT_DEFAULT=/tmp/fa4-fp8kv-ab source bench/device_env.sh
export PYTHONUNBUFFERED=1
S=$(date +%s)
LIBS=(libfa4)
for v in "${VARIANTS[@]}"; do
  set -- $v
  [[ -f $DIR/lib/libfa4_$1.so ]] && LIBS+=("libfa4_$1")
done
# One process per build and q dtype (decode_peers takes no --ab with --fp8-kv); main first and last,
# so a drift of the machine shows as main's two rows disagreeing.
run() {  # lib dtype tag
  timeout 90 python3 bench/decode_peers.py --fp8-kv --fp8-q-dtype "$2" --lib "$DIR/lib/$1.so" --kv 4k,16k,64k \
    --pages 0,16,64 --out "$OUT/$3" > "$OUT/$3.log" 2>&1
}
for dt in bf16 fp16; do
  for lib in "${LIBS[@]}"; do run "$lib" $dt "${lib}_$dt"; done
  run libfa4 $dt "libfa4_${dt}_again"
done
echo "timings done $(( $(date +%s) - S )) s"
if [[ $TESTS == 1 ]]; then
  for name in $TESTED; do
    T=$DIR/test_cuda_$name
    [[ -x $T ]] || continue
    FA4_CUDA_KERNEL=sm90 FA4_CUDA_CASES=40 timeout 150 "$T" \
      --gtest_filter='CudaBackend.Sm90Fp8KvDecode:CudaBackend.Fp8*:CudaBackend.DecodeShapes' > "$OUT/tests_$name.log" 2>&1
    echo "rc $?" >> "$OUT/tests_$name.log"
    for tool in racecheck synccheck; do
      FA4_CUDA_CASES=3 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 "$T" \
        --gtest_filter='CudaBackend.Sm90Fp8KvDecode' > "$OUT/${tool}_$name.log" 2>&1
      echo "rc $?" >> "$OUT/${tool}_$name.log"
    done
  done
  echo "tests done $(( $(date +%s) - S )) s"
fi
if [[ $NCU == 1 && -f $DIR/lib/libfa4.so ]]; then
  OUT=$OUT/ncu LIB=$DIR/lib/libfa4.so bash bench/ncu_source.sh "128 16384 0 fp8kv" > "$OUT/ncu.log" 2>&1
fi
tar czf "$OUT/logs.tgz" -C "$OUT" --exclude=logs.tgz . 2>/dev/null
echo "===== tests ====="
for f in "$OUT"/tests_*.log "$OUT"/racecheck_*.log "$OUT"/synccheck_*.log; do
  [[ -f $f ]] || continue
  echo "$(basename "$f"): $(grep -E '^\[  (PASSED|FAILED)|^rc |RACECHECK SUMMARY|ERROR SUMMARY' "$f" | tr '\n' ' ')"
  grep -A6 "Failure" "$f" | head -20
done
echo "===== tokens/s fp8 / 16-bit cache (B 32, 32/8, D 128, Sq 1; columns kv / page) ====="
python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
for name in sorted(d for d in os.listdir(out) if os.path.isfile(os.path.join(out, d, "decode.json"))):
    rows = json.load(open(os.path.join(out, name, "decode.json"))).get("fp8_kv", [])
    cells = [f"{r['kv_len'] // 1024}k/{r['page']}: {r.get('tokens_ratio_fp8_bf16') or float('nan'):.3f} "
             f"({(r.get('fa4_gbs') or float('nan')) / 1000:.2f} TB/s)" for r in rows]
    print(f"{name:22s} " + "  ".join(cells))
EOF
