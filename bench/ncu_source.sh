#!/usr/bin/env bash
# Per-instruction profile of fa4's prefill kernel (ncu SourceCounters: executed instructions and
# stall samples per SASS instruction), exported as CSV for offline analysis. PEER=1 also profiles
# the FlashAttention-2 peer's kernel (PyTorch SDPA flash) on the same shape, for a side-by-side
# of where each kernel's cycles go (prologue / main loop / epilogue); PEER=fa3 the
# FlashAttention-3 kernel (its wheel installed: ../shared/PEERS.md).
#   OUT=/dir [PEER=1|fa3] [LIB=build-device/lib/libfa4_NAME.so] bash bench/ncu_source.sh "256 1024 1" ...
#     (D S causal [dtype]; LIB: a variant build of bench/stage_sm90_variant.sh, profiled as fa4;
#     dtype: bf16 (default), e4m3 (all-fp8), fp8kv (B 32 decode against an e4m3 cache of S keys:
#     bench/cuda_ncu_case.py), e.g. "128 16384 0 fp8kv")
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DEFAULT=/tmp/fa4-ncu source bench/device_env.sh
for c in "$@"; do
  set -- $c
  dt=${4:-bf16}
  tag="d$1_s$2_c$3$([[ $dt != bf16 ]] && echo "_$dt")"
  cz=$([[ $3 == 1 ]] && echo --causal)
  kernels=("fa4:fa4::.*fwd_kernel")
  [[ "${PEER:-0}" == 1 ]] && kernels+=("fa2:flash_fwd_kernel")
  [[ "${PEER:-0}" == fa3 ]] && kernels+=("fa3:FlashAttnFwdSm90")
  for kk in "${kernels[@]}"; do
    name=${kk%%:*} rx=${kk#*:}
    base="$OUT/src_${tag}_$name"
    [[ $name == fa4 ]] && base="$OUT/src_$tag${LIB:+_$(basename "$LIB" .so)}"
    ncu --clock-control none --kernel-name-base demangled -k regex:"$rx" --launch-skip 1 --launch-count 1 \
      --section SourceCounters --section WarpStateStats --section SpeedOfLight \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables -f -o "$base" \
      python3 bench/cuda_ncu_case.py --lib "${LIB:-$DIR/lib/libfa4.so}" --d $1 --s $2 $cz --dtype $dt --reps 2 > "$base.log" 2>&1
    ncu --import "$base.ncu-rep" --page source --print-source sass --csv > "$base.csv" 2>> "$base.log"
    ncu --import "$base.ncu-rep" --page details --csv > "$base.details.csv" 2>> "$base.log"
    gzip -f "$base.csv"
    ls -la "$base.csv.gz"
  done
done
