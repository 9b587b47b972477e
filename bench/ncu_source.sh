#!/usr/bin/env bash
# Per-instruction profile of fa4's prefill kernel (ncu SourceCounters: executed instructions and
# stall samples per SASS instruction), exported as CSV for offline analysis.
#   OUT=/dir bash bench/ncu_source.sh "256 1024 1" ...     (D S causal)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DEFAULT=/tmp/fa4-ncu source bench/device_env.sh
for c in "$@"; do
  set -- $c
  tag="d$1_s$2_c$3"
  cz=$([[ $3 == 1 ]] && echo --causal)
  ncu --clock-control none --kernel-name-base demangled -k regex:"fa4::.*fwd_kernel" --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight -f -o "$OUT/src_$tag" \
    python3 bench/cuda_ncu_case.py --lib "$DIR/lib/libfa4.so" --d $1 --s $2 $cz --reps 2 > "$OUT/src_$tag.log" 2>&1
  ncu --import "$OUT/src_$tag.ncu-rep" --page source --print-source sass --csv > "$OUT/src_$tag.csv" 2>> "$OUT/src_$tag.log"
  gzip -f "$OUT/src_$tag.csv"
  ls -la "$OUT/src_$tag.csv.gz"
done
