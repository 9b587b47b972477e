#!/usr/bin/env python3
"""CTest Sm90KeyLoopsAreWarpUniform: no sm90 kernel's key loop is compiled as divergent.

ptxas guards the warp-synchronous instructions of a region it cannot prove warp-uniform with
BRA.DIV / WARPSYNC and moves every wgmma descriptor to uniform registers again (R2UR) inside
it. In the consumer's key loop that cost 5-6 % of the balanced D 128 instance
(docs/perf/h100-2026-12-07-session.md); the trigger was a branch on a value ptxas took for
per-lane (a named barrier's reduction), far from the loop. Nothing else would notice such a
regression on a machine without a GPU, so every build with the cuda backend reads its own sm_90a
SASS (cuobjdump + nvdisasm: the CUDA toolkit's, or NVIDIA's PyPI wheels, scripts/deps.sh) and
counts BRA.DIV in each kernel's key loop (bench/sass_loop.py says how the loop is found).

Known exception: the split_kv instances at D 64 / D 128 (their inlined split merge; 3 each).
Calling the merge instead (FA4_SM90_CALLED_MERGE=1) removes them but ran split decodes 0.93-0.98x
on an H100 (src/cuda/sm90/fwd_config.h), so the default keeps them.

  python3 tests/check_sass_loops.py CUOBJDUMP OBJECT [OBJECT ...]   (';'-separated lists too)
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from sass_loop import kernels, loop_counts  # noqa: E402

MIN_LOOPS = 30  # 37 at 525b818 (bf16 / fp16 / e4m3 instances, gather variants)
ALLOWED_BRA_DIV = {"fwd_d64_split_kv.cu.o": 3, "fwd_d128_split_kv.cu.o": 3}


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: check_sass_loops.py CUOBJDUMP OBJECT [OBJECT ...]")
    tool = sys.argv[1]
    objs = [o for a in sys.argv[2:] for o in a.split(";") if o]
    objs = sorted(o for o in objs if "/sm90/" in o and o.endswith(".cu.o"))
    if not objs:
        sys.exit("no sm90 CUDA objects given")
    bad, checked = [], 0
    for o in objs:
        r = subprocess.run([tool, "-sass", o], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{tool} -sass {o} failed: {r.stderr.strip()}")
        loops = [(name, loop_counts(ins)) for name, ins in kernels(r.stdout.splitlines()).items()]
        loops = [(n, c) for n, c in loops if c is not None]  # (fp8_vt: no wgmma; balanced: off by default)
        allowed = ALLOWED_BRA_DIV.get(os.path.basename(o), 0)
        for name, c in loops:
            checked += 1
            if c["BRA.DIV"] > allowed:
                bad.append(f"{os.path.basename(o)}: {name[:90]}... key loop has {c['BRA.DIV']} BRA.DIV "
                           f"(allowed {allowed}), {c['R2UR']} R2UR")
    print(f"{checked} sm90 key loops in {len(objs)} objects checked")
    if checked < MIN_LOOPS:  # a SASS format this parser no longer reads must not pass quietly
        bad.append(f"only {checked} key loops found, expected >= {MIN_LOOPS}")
    if bad:
        print("\n".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
