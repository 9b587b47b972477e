#!/usr/bin/env bash
# Profiles fa4's sm80 prefill kernel and the FlashAttention-2 peer (PyTorch SDPA flash) on the
# same shapes with ncu and prints one compact line of key metrics per kernel: where the time
# goes when fa4 trails FA2. Needs the staged binaries (bench/device_run.sh --stage).
#   OUT=/dir bash bench/ncu_compare.sh "128 512 0" "256 1024 1" ...     (D S causal)
# A fourth field e4m3 profiles the fp8 path against FA3's fp8 kernel (its wheel installed:
# .peers/peers-a/peer-install.sh): "128 4096 0 e4m3".
# CUDNN=1 adds PyTorch SDPA's cuDNN kernel (bf16): its launch shape (grid, block, shared memory,
# registers) beside fa4's and FA3's, for the short shapes where cuDNN is the strongest peer.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DEFAULT=/tmp/fa4-ncu source bench/device_env.sh
STALLS="barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle no_instruction wait not_selected dispatch_stall lg_throttle branch_resolving"
METRICS="gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__shared_mem_per_block_dynamic,sm__cycles_elapsed.avg.per_second,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__average_warp_latency_per_inst_issued.ratio,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__m_xbar2l1tex_read_bytes.sum"
for s in $STALLS; do METRICS+=",smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio"; done
for c in "$@"; do
  set -- $c
  dt=${4:-bf16}
  tag="d$1_s$2_c$3_$dt"
  cz=$([[ $3 == 1 ]] && echo --causal)
  # (fa4's sm80 / sm90 fwd_kernel, FA2's flash_fwd_kernel, FA3's FlashAttnFwdSm90 device kernel)
  # (demangled names: FA3's kernels are cutlass::device_kernel<...FlashAttnFwdSm90...>, whose
  # function name alone is device_kernel -- 2026-12-06 the filter caught fa4's kernel only)
  filt="fwd_kernel|FlashAttnFwd" count=3 extra=""
  if [[ ${CUDNN:-0} == 1 ]]; then filt+="|cudnn|sdpa|xmma|fmha|fprop" count=7 extra=--cudnn; fi
  ncu --clock-control none --kernel-name-base demangled -k regex:"$filt" --launch-skip 1 --launch-count $count --csv --metrics "$METRICS" \
    python3 bench/cuda_ncu_case.py --lib "$DIR/lib/libfa4.so" --d $1 --s $2 $cz --dtype $dt --reps 2 $extra > "$OUT/ncu_$tag.csv" 2> "$OUT/ncu_$tag.err"
  python3 - "$OUT/ncu_$tag.csv" "$tag" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; data = rows[1:]
ik, im, iv = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value")
iid = hdr.index("ID"); iu = hdr.index("Metric Unit")
per = collections.OrderedDict()
for r in data:
    per.setdefault((r[iid], r[ik]), {})[r[im]] = r[iv] + (r[iu] if r[im] == "gpu__time_duration.sum" else "")
short = {"gpu__time_duration.sum": "time", "launch__grid_size": "grid", "launch__block_size": "block",
         "launch__shared_mem_per_block_dynamic": "dsmem", "sm__cycles_elapsed.avg.per_second": "clk", "launch__registers_per_thread": "regs", "sm__warps_active.avg.pct_of_peak_sustained_active": "occ%",
         "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tc%", "smsp__inst_executed.sum": "inst",
         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": "bankc", "smsp__average_warp_latency_per_inst_issued.ratio": "cpi",
         "dram__bytes_read.sum": "dram_rd", "dram__bytes_write.sum": "dram_wr", "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram%",
         "lts__t_sector_hit_rate.pct": "l2hit%",
         "lts__throughput.avg.pct_of_peak_sustained_elapsed": "l2%", "l1tex__m_xbar2l1tex_read_bytes.sum": "l2_to_sm"}
for (i, k), m in per.items():
    # (names as ncu prints them: fa4's "void fwd_kernel<FwdTraits<...>>" or "fa4::...", FA3's
    # device_kernel<...FlashAttnFwdSm90...>, FA2's flash_fwd_kernel<...>)
    name = ("fa3" if "FlashAttnFwd" in k or "device_kernel" in k else
            "fa4" if k.startswith(("void fa4", "void fwd_kernel<", "fwd_kernel<")) or "fa4::" in k else
            "fa2" if "flash_fwd" in k else "cudnn:" + k[:60].replace(" ", "_"))
    out = [sys.argv[2], name]
    for key, lab in short.items():
        v = m.get(key, "?").replace(",", "")
        out.append(f"{lab}={v}")
    st = sorted(((float(v.replace(',', '')), key.split("stalled_")[1].split("_per")[0]) for key, v in m.items() if "stalled_" in key), reverse=True)[:5]
    out.append("stalls: " + " ".join(f"{n}={x:.2f}" for x, n in st))
    print("  ".join(out))
PY
done
